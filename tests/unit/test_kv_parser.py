"""The platform's Redis clients read replies with hiredis's parser, in C.

redis-py parses replies in Python unless hiredis is installed. In the login storm (issue 39)
the api spent about a quarter of its time in redis-py, much of it parsing; with hiredis the
storm's last first frame came 2.9 s sooner (11.68 and 10.81 s against 14.52 and 13.76 s,
alternated on a quiet machine). A deployment without it would still work, slower: this test
keeps it a dependency that is really used.
"""

from __future__ import annotations

from redis._parsers.hiredis import _AsyncHiredisParser

from deskpool import kv


def test_the_kv_client_parses_replies_with_hiredis() -> None:
    client = kv.BoundedRedis()
    connection = client.connection_pool.make_connection()
    assert isinstance(connection._parser, _AsyncHiredisParser)
