# frozen_string_literal: true

# A client of django-jobqueue's HTTP SDK gateway (docs/gateway.md): JobQueue::Client
# for the producer calls and the worker protocol's calls, JobQueue::Worker for a
# worker loop, JobQueue::Job for JoobQ-style job classes, and one JobQueue::Error
# subclass per error code. Standard library only (net/http, json).
require_relative "jobqueue_client/version"
require_relative "jobqueue_client/errors"
require_relative "jobqueue_client/client"
require_relative "jobqueue_client/job"
require_relative "jobqueue_client/worker"
