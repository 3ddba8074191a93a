"""The local workload runner: kubelet, Job controller and Deployment controller for one node.

It runs the Jobs, Deployments and bare Pods (``spec.nodeName`` = this node) of an API server (normally the
emulated one of ``kcpshard_testkit.apiserver``) as local processes, through ``kcpshard.k8s.api.ApiClient``:

- Each container's ``command`` + ``args`` runs as a local process (there is no image, so a container without
  ``command`` fails the pod with ``StartError``), in its own process group, with ``PR_SET_PDEATHSIG=SIGKILL``;
  stdout and stderr go to ``sandbox/pods/<ns>_<pod>_<uid8>/<container>.log`` (appended across restarts).
- Env as the kubelet builds it (``envFrom``, ``env`` with ``$(VAR)`` expansion, ``fieldRef``,
  ``secretKeyRef``, ``configMapKeyRef``), on top of ``PATH`` (the runner's), ``HOME`` (the pod folder),
  ``HOSTNAME`` and ``extra_env``; ``KUBERNETES_SERVICE_HOST/PORT`` are never set. The working directory is the
  pod folder unless ``workingDir`` is set.
- Volumes: ``hostPath`` -> ``sandbox/nodes/<node>/<path>``, ``emptyDir`` ->
  ``<pod folder>/volumes/<name>``, ``secret``/``configMap``/``downwardAPI``/``projected`` -> files of
  their keys in ``<pod folder>/volumes/<name>``.
- Every pod shares the host network (``hostNetwork: false`` too); ``podIP`` = ``hostIP`` = 127.0.0.1.
- Deployments own their pods directly (no ReplicaSet) and replace pods Recreate-style on a template change.

**Path mapping, the one deliberate difference from a kubelet.** A local process cannot bind-mount, so
paths are rewritten instead: every argument of ``command``/``args``, every env value and ``workingDir``
that equals a container ``volumeMounts[].mountPath`` or starts with ``mountPath + "/"`` has that prefix
replaced by the local folder of the volume (with ``subPath`` appended); the longest mountPath wins. For an
argument of the form ``-flag=value`` / ``--flag=value`` the rule applies to ``value``. Paths inside files,
or built at run time by the program, are not rewritten: pass them on the command line or in env. The
rule applies to host paths too: a mountPath such as ``/work`` also rewrites ``/work/main/.venv/bin/python``,
so pick mountPaths that prefix no host path the pod names (the failure is a clear ``StartError``).
"""

from kcpshard_testkit.runner.runner import WorkloadRunner

__all__ = ["WorkloadRunner"]
