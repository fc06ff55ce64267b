# frozen_string_literal: true

require_relative "lib/jobqueue_client/version"

Gem::Specification.new do |spec|
  spec.name = "jobqueue_client"
  spec.version = JobQueue::VERSION
  spec.summary = "Client and worker of django-jobqueue's HTTP SDK gateway"
  spec.description = "Producer calls (enqueue, batch, ids, get, cancel, retry), the worker protocol " \
                     "and a threaded worker with JoobQ-style job classes, over net/http and json only."
  spec.authors = ["django-jobqueue maintainers"]
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.1"
  spec.files = Dir["lib/**/*.rb", "bin/*", "README.md"]
  spec.bindir = "bin"
  spec.executables = ["jobqueue-worker"]
  spec.require_paths = ["lib"]
  spec.metadata["rubygems_mfa_required"] = "true"
end
