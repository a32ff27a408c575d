"""Guards of the service's edges: host and origin checks, body limits, upstream URL checks, secret scrubbing."""
