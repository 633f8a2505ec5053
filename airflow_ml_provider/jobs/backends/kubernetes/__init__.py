"""The Kubernetes backends (MPIJob, Volcano Job, Indexed Job) and what they share: REST calls and the shared
watch (``base``, ``rest``, ``watch``), pod templates, pod logs and Kueue queueing."""
