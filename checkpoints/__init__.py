"""Consistent snapshots of the state to S3, HDFS or a local directory, and bootstrap.

A checkpoint is a folder ``<prefix>/<log_offset>/`` of parts plus a ``MANIFEST.json`` written
last; a folder without a manifest is not a checkpoint. Callers hand in the parts a state
machine produced and get back the newest valid checkpoint on restore.
"""
