"""Health and metrics endpoints shared by the scheduler, the worker and the API.

Below every other layer but settings (it imports nothing of ours): the engine and the worker serve
their registry and probes through `endpoint.serve`; the decisions themselves are pure functions in
`probes`, so they are tested without a process, a clock or a socket.
"""
