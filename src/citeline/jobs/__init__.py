"""Jobs: documents are ingested in the background, one version per job, by a runner.

The catalog is the queue: a version waits there ``queued`` until a runner claims it (see
:func:`citeline.store.catalog.claim_jobs`), so a job names only a document version and reads the
stored original. Any number of runners, in any number of processes, share one queue.
"""

from citeline.jobs.runner import JobRunner, ThreadRunner

__all__ = ["JobRunner", "ThreadRunner"]
