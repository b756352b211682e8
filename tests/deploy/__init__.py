"""Tests of the deployment files in deploy/: the systemd unit, the image, the Kubernetes base."""
