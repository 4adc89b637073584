"""`tfcli serve`: an OpenAI-compatible HTTP server around the engine.

api.py checks requests, shapes.py builds answers, batcher.py is the engine thread whose decode steps
requests share (events.py: what it tells each request), app.py is the Starlette app, server.py runs it under uvicorn. The CLI
(cli/serve.py) only loads the model and starts this; starlette and uvicorn are imported by
`tfcli serve` alone.
"""
