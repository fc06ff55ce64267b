# A client of django-jobqueue's HTTP SDK gateway (docs/gateway.md): `JobQueue::Client`
# for the producer calls and the worker protocol's calls, `JobQueue::Worker` for a
# worker loop, `JobQueue::Job` for JoobQ-style job classes, and one `JobQueue::Error`
# subclass per error code. Standard library only (HTTP::Client, JSON).
require "./jobqueue_client/errors"
require "./jobqueue_client/answers"
require "./jobqueue_client/client"
require "./jobqueue_client/job"
require "./jobqueue_client/worker"

module JobQueue
  # The client's version, sent in a worker's registration.
  VERSION = "0.1.0"
end
