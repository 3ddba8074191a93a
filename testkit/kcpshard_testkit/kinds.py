"""API references only the test kit needs (the product's are in kcpshard.k8s.api)."""

from __future__ import annotations

from kcpshard.k8s.api import ResourceRef

# A plain kind for API client tests.
CONFIGMAPS = ResourceRef("", "v1", "configmaps")
