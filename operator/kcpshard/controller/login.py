"""kopf logs in with the operator's own credentials: one source for kopf and for the operator's ApiClient.

Without a login handler kopf would log in through the `kubernetes` package's global configuration, a
second reading of the kubeconfig (it takes the last file's current-context, swallows exec failures). Here
the first of kopf's login and the startup handler loads ``Credentials`` once (in a thread: an exec plugin
may run) and makes ``memo.api`` from them; the login handler hands kopf the same credentials as a
``kopf.ConnectionInfo``. kopf logs in again after a 401 or once ``expiration`` passes, and keeps no
``ConnectionInfo`` equal to one it invalidated, so a later login forces a refresh: the exec plugin runs
again or the token file is read again, for kopf and the ApiClient alike.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from kcpshard.k8s.api import ApiClient
from kcpshard.k8s.credentials import Credentials, KubeconfigError

_LOCK = "login_lock"
_LOGGED_IN = "logged_in"


def connection_info(credentials: Credentials) -> kopf.ConnectionInfo:
    """kopf's view of ``credentials``: the same server, CA, client certificate, token and expiry."""
    return kopf.ConnectionInfo(
        server=credentials.server,
        ca_data=credentials.ca_data,
        insecure=credentials.insecure or None,
        scheme=credentials.scheme if credentials.token else None,
        token=credentials.token,
        certificate_data=credentials.cert_data,
        private_key_data=credentials.key_data,
        default_namespace=credentials.namespace,
        proxy_url=credentials.proxy_url,
        # The credential's own end only: a token file's periodic re-read is the ApiClient's business; as an
        # expiration it would make kopf drop its watches every minute.
        expiration=credentials.expires_at,
    )


async def operator_api(memo: kopf.Memo) -> ApiClient:
    """``memo.api``, made on first use from the operator's credentials ($KUBECONFIG or in-cluster)."""
    lock: asyncio.Lock = memo.setdefault(_LOCK, asyncio.Lock())
    async with lock:
        if memo.get("api") is None:
            memo["api"] = await ApiClient.open()
        api: ApiClient = memo["api"]
        return api


Logger = logging.Logger | logging.LoggerAdapter[Any]


@kopf.on.login()
async def login(memo: kopf.Memo, logger: Logger, **_: Any) -> kopf.ConnectionInfo:
    """kopf's credentials: those of the operator's ApiClient, refreshed when kopf logs in again.

    A kubeconfig that cannot be read stops the operator (a retry reads the same file); other errors are
    retried by kopf."""
    try:
        api = await operator_api(memo)
        again = bool(memo.get(_LOGGED_IN))
        credentials = await api.fresh_credentials(force=again)
    except KubeconfigError as exc:
        raise kopf.PermanentError(str(exc)) from None
    memo[_LOGGED_IN] = True
    logger.info("logged in to %s (%s)", credentials.server, credentials.source)
    return connection_info(credentials)
