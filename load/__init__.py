"""Load generation for Sandman (issue 7): the burst benchmark (``load.burst``) and the
locust trainer users (``load/locust/``). See docs/load.md."""
