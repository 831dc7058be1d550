"""The data path on Spark: tables read from a session, and what the pandas path measures
(digest, fidelity, missing shares) computed as Spark jobs with equal results.

Nothing is imported here: the command line checks :data:`SPARK_PREFIX` while it parses
its options, before pandas or pyspark are loaded.
"""

SPARK_PREFIX = "spark:"
"""``--data spark:<table>`` names a table of the Spark session's catalog."""
ROW_LIMIT = 20
"""Rows of Spark data ``govern explain-row`` collects at most (``--limit``)."""
