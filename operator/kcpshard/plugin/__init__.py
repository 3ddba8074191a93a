"""`kubectl kcpshard`: the kubectl plugin for people (status, promote, abort, retry, history, list).

The `kcpshard` command is the operator's and the agents' program; this one is for a person at a
terminal. `render` is pure (objects in, lines out); `live` watches the objects and redraws them;
`commands` carries out each sub-command; `cli` parses the line and turns failures into one line.
"""
