"""What the provider adds to Airflow's API server: the training view, and trigger refusals in the Params' words."""
