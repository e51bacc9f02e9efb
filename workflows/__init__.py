"""Decision workflows: the model, its validation, CEL criteria, versions and the pure step.

A workflow is a DAG rooted at an ``event`` node whose nodes carry ordered edges with CEL
criteria; the first true edge is taken, else the node's default edge. Everything here is pure
(no I/O): callers load and store workflows themselves and call :func:`step` to walk one node.
Imports nothing else of Railflow.
"""
