"""The pure parts of the slot's kine: its address read from its log line, and its log scrubbed of the DSN.
The lines are kine v0.17.5's own, as it printed them here (colour codes included)."""

from __future__ import annotations

import pytest

from kcpshard.agent.kine import AVAILABLE, dsn_secrets, scrubber

# kine v0.17.5, --listen-address=127.0.0.1:0, stderr into a pipe.
LISTENING = (
    "\x1b[36mINFO\x1b[0m[2026-12-04T04:44:29.740724915Z] Kine available at http://127.0.0.1:37819     "
)
# kine v0.17.5 with KINE_ENDPOINT='postgres://u:s3cr3tpw@127.0.0.1:bad/db': Go's URL error quotes it whole.
UNPARSABLE = (
    b"\x1b[31mFATA\x1b[0m[2026-12-04T04:46:29.385066498Z] failed to create driver for configured endpoint: "
    b"failed to parse datastore DSN URL; ensure that parameters containing special characters use "
    b'percent-encoding: parse "postgres://u:s3cr3tpw@127.0.0.1:bad/db": invalid port ":bad" after host'
)


def _address(line: str) -> str | None:
    found = AVAILABLE.search(line)
    return found.group(1) if found else None


def test_the_address_is_read_from_kines_line_with_its_colour_codes() -> None:
    assert _address(LISTENING) == "http://127.0.0.1:37819"
    assert _address('time="..." level=info msg="Kine available at http://127.0.0.1:2379"') == (
        "http://127.0.0.1:2379"
    )


@pytest.mark.parametrize(
    "line",
    [
        "Kine available at http://127.0.0.1:3[hidden]",  # a port the scrubber cut: no half address
        "Kine available at unix://kine.sock",
        "Configuring database table schema and indexes, this may take a moment...",
    ],
)
def test_no_address_from_other_lines(line: str) -> None:
    assert _address(line) is None


def test_a_dsn_that_kine_quotes_whole_is_hidden() -> None:
    scrub = scrubber("postgres://u:s3cr3tpw@127.0.0.1:bad/db")
    line = scrub(UNPARSABLE)
    assert b"s3cr3tpw" not in line and b"127.0.0.1:bad" not in line
    assert line.endswith(b'percent-encoding: parse "[hidden]": invalid port ":bad" after host')


def test_the_password_is_hidden_wherever_it_shows_as_written_or_decoded() -> None:
    scrub = scrubber("postgres://kcp:p%40ss%2Fw0rd@db.example:5432/kcp?sslmode=require")
    assert scrub(b"auth failed for p%40ss%2Fw0rd and p@ss/w0rd") == b"auth failed for [hidden] and [hidden]"
    assert scrub(b"connecting to postgres://kcp:p%40ss%2Fw0rd@db.example:5432/other") == (
        b"connecting to postgres://kcp:[hidden]@db.example:5432/other"
    )


def test_credentials_in_other_shapes_are_hidden() -> None:
    scrub = scrubber("sqlite:///var/lib/kine/state.db")
    assert scrub(b"dial mysql://root:pw@tcp(db:3306)/kine") == b"dial mysql://root:[hidden]@tcp(db:3306)/kine"
    assert scrub(b"host=db user=kcp password=hunter2 sslpassword=x9") == (
        b"host=db user=kcp password=[hidden] sslpassword=[hidden]"
    )
    # Lines without credentials pass as they are.
    assert scrub(b"Kine available at http://127.0.0.1:2379") == b"Kine available at http://127.0.0.1:2379"
    assert scrub(b"opened /var/lib/kine/other.db") == b"opened /var/lib/kine/other.db"


def test_what_of_a_dsn_is_secret() -> None:
    sqlite = "sqlite:///var/lib/kine/state.db?_journal=WAL"
    assert dsn_secrets(sqlite) == [sqlite.encode()]
    # A short password is hidden only where it stands as one (userinfo, password=): not every "ab".
    assert dsn_secrets("postgres://u:ab@db/kcp") == [b"postgres://u:ab@db/kcp"]
    assert dsn_secrets("postgres://u:se%2Fret@db/kcp") == [
        b"postgres://u:se%2Fret@db/kcp",
        b"se%2Fret",
        b"se/ret",
    ]
