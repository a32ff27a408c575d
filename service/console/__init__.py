"""The web console at /console: static HTML, CSS and JS over the REST API."""
