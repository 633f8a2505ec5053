"""The label keys a job carries, in one place: backends set them, the log shipper and the Elasticsearch
source read them, so a key means the same thing to all of them."""

PREFIX = "ml.airflow.apache.org"
JOB_NAME = f"{PREFIX}/job-name"
DAG_ID = f"{PREFIX}/dag-id"
TASK_ID = f"{PREFIX}/task-id"
RUN_ID = f"{PREFIX}/run-id"
MAP_INDEX = f"{PREFIX}/map-index"
TRY_NUMBER = f"{PREFIX}/try-number"
PREEMPTIONS = f"{PREFIX}/preemptions"
SEARCH = f"{PREFIX}/search"
TRIAL = f"{PREFIX}/trial"
