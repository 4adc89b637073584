"""What `import tfcli` offers (tfcli/__init__.py lists it): a model in Python, its sites read and
changed, and the experiments as functions returning results that draw themselves.

Private: the names here are free to move; `tfcli.__all__` is the public surface.

    names.py     (site, block) keys and TransformerLens's hook names, resolved to the engine's sites
    hooks.py     a user's hook wrapped: its result checked, its errors naming the site
    cache.py     ActivationCache: what run_with_cache kept, by key or alias
    model.py     load() and Model: tokens, generation, scoring, chat, run_with_cache, hooks
    experiments.py   lens, patch, ablate, steer, heads, attention, features, params
    results.py   the result objects: text form, _repr_html_, save()
    drawing.py   SVG and PNG of a result, through the command line's drawing code (imported late)
"""
