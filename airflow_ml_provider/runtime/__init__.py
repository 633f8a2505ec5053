"""Code that runs inside a training worker; never imports Airflow."""
