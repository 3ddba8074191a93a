"""Carrying actions out: each handler does what its action says and returns what it saw, nothing else.

The handlers decide nothing: the action they get (from `kcpshard.roll.plan`) names every object,
name and timeout. They write no status, no condition and no Event (the status writer does), and they
import nothing of the roll but its types (`actions`, `observed`, `outcomes`); the layer test holds
them to that.
"""
