"""Locust load tests and the burst benchmark (issue 7). Not built yet."""
