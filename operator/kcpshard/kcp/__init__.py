"""kcp: the version table (`versions`), the `kcp start` flag table (`flags`), admin.kubeconfig readers
(`kubeconfig`) and the async client for readiness, the controller lease and probe workspaces (`client`)."""
