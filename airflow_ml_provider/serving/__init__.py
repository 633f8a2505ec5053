"""Deploy targets for registered models (KServe InferenceService)."""
