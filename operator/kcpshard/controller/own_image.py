"""The agents' image when `--image` is not given: the operator's own, read from its pod at start.

kustomize's `images:` and a Helm chart's `image` set the operator's container image only; reading it back
from the pod (named by POD_NAME, in the namespace of the operator's credentials) gives the agents the
same image, so one setting moves the operator and its agents together.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from kcpshard.k8s.api import PODS, ApiClient, ApiError

log = logging.getLogger(__name__)
CONTAINER = "operator"  # deploy/base's name for the operator's container


async def own_image(api: ApiClient) -> str | None:
    """The image of this pod's operator container; None outside a pod or when the pod cannot be read."""
    pod_name = os.environ.get("POD_NAME")
    if not pod_name:
        return None
    namespace = api.default_namespace
    try:
        pod = await api.get(PODS, namespace, pod_name)
    except ApiError as exc:
        log.warning("cannot read this operator's pod %s/%s for its image: %s", namespace, pod_name, exc)
        return None
    containers: list[dict[str, Any]] = (pod.get("spec") or {}).get("containers") or []
    named = [c for c in containers if c.get("name") == CONTAINER] or containers[:1]
    image = named[0].get("image") if named else None
    return str(image) if image else None
