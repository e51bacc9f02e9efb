"""Entry point for ``spark-submit``: the same commands as ``railflow pipeline``.

    spark-submit --master local[2] pipeline/submit.py features --events ev/ --out feats/

The session picks up spark-submit's master and configuration; run it with the project's
virtualenv Python on the driver and workers (``PYSPARK_PYTHON``) so they import the project.
"""

from pipeline.cli import app

if __name__ == "__main__":
    app()
