"""Deployment helpers shared by the k8s/Helm/compose files and their tests: the Redis lists a
Celery queue occupies (what KEDA must count) and the sync of the alert rules and the Grafana
dashboard into k8s and Helm."""
