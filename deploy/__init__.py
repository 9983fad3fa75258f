"""Repository tooling for the k8s/Helm/compose files and their tests (not part of the installed
package; run from the repository root): the KEDA triggers that count a queue's Redis lists, and
the sync of the alert rules and the Grafana dashboard into k8s and Helm
(``python -m deploy.rules``, ``make sync-rules``)."""
