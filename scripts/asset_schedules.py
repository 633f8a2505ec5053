"""The project's Asset-scheduled DAGs (ml_batch_scoring: it scores each version the pipeline registers) left
unpaused on an Airflow home. ``dag.test()`` (``make demo``) registers every DAG of the folder, paused by
``[core] dags_are_paused_at_creation``, and a registered DAG keeps its flag: after ``make demo`` then ``make ui``
a new champion was never scored. Run as a script (``make ui``) it prints the DAGs it unpaused."""

from __future__ import annotations


def unpause_asset_scheduled() -> list[str]:
    """Unpause every paused DAG that runs on Asset events; returns their ids."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        paused = session.query(DagModel).filter(DagModel.is_paused.is_(True), DagModel.asset_expression.isnot(None))
        unpaused = sorted(dag.dag_id for dag in paused)
        for dag in paused:
            dag.is_paused = False
    return unpaused


if __name__ == "__main__":
    print(" ".join(unpause_asset_scheduled()))
