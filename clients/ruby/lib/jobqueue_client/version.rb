# frozen_string_literal: true

module JobQueue
  # The client's version, sent in a worker's registration.
  VERSION = "0.1.0"
end
