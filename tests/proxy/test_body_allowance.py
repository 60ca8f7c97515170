"""The allowance for large request bodies in flight (`proxy_app.BodyAllowance`, review h40 F6): first come, first
served; a taker that times out or is cancelled leaves nothing taken and nobody stuck behind it."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("starlette", reason="the proxy extra is absent (pip install 'arc-ref[proxy]')")

from arc_ref.frontends.proxy_app import BodyAllowance  # noqa: E402


def test_takers_are_served_in_order_and_what_is_given_back_goes_to_the_first_in_line() -> None:
    async def scenario() -> None:
        allowance = BodyAllowance(10)
        assert await allowance.take(6, 1.0) and allowance.free == 4
        large = asyncio.ensure_future(allowance.take(8, 5.0))
        await asyncio.sleep(0)
        small = asyncio.ensure_future(allowance.take(3, 5.0))  # would fit now, but comes after the large one
        await asyncio.sleep(0.05)
        assert not large.done() and not small.done()
        assert not allowance.take_now(1)  # nobody passes the line
        allowance.give_back(6)
        assert await large and allowance.free == 2
        await asyncio.sleep(0.05)
        assert not small.done()
        allowance.give_back(8)
        assert await small and allowance.free == 7
        allowance.give_back(3)
        assert allowance.free == allowance.total == 10

    asyncio.run(scenario())


def test_a_taker_that_times_out_or_is_cancelled_takes_nothing_and_holds_nobody_back() -> None:
    async def scenario() -> None:
        allowance = BodyAllowance(10)
        assert await allowance.take(10, 1.0)
        assert not await allowance.take(5, 0.05)  # timed out
        cancelled = asyncio.ensure_future(allowance.take(9, 5.0))
        await asyncio.sleep(0)
        after = asyncio.ensure_future(allowance.take(4, 5.0))
        await asyncio.sleep(0.02)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        allowance.give_back(10)
        assert await after and allowance.free == 6  # the cancelled one took nothing and did not block it
        allowance.give_back(4)
        assert allowance.free == 10 and allowance.take_now(10)

    asyncio.run(scenario())


def test_given_as_the_time_runs_out_it_is_given_back() -> None:
    """The grant and the timeout in the same turn of the loop: the taker says False and nothing stays taken."""
    async def scenario() -> None:
        allowance = BodyAllowance(10)
        assert await allowance.take(10, 1.0)
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(allowance.take(10, 0.05))
        loop.call_later(0.05, allowance.give_back, 10)  # about when its time runs out
        outcome = await waiter
        await asyncio.sleep(0.01)
        assert allowance.free == (0 if outcome else 10), (outcome, allowance.free)

    for _ in range(20):
        asyncio.run(scenario())
