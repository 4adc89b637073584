"""What `import tfcli` offers (tfcli/__init__.py lists it): a model in Python, its sites read and
changed, and the experiments as functions returning results that draw themselves.

Private: the names here are free to move; `tfcli.__all__` is the public surface.

    names.py     (site, block) keys and TransformerLens's hook names, resolved to the engine's sites
    hooks.py     a user's hook wrapped: its result checked, its errors naming the site
    cache.py     ActivationCache: what run_with_cache kept, by key or alias
    model.py     load() and Model: tokens, generation, scoring, chat, run_with_cache, hooks
    experiments.py   lens, patch, ablate, steer, heads, attention, mask, features, params
    result.py    what every result has: its text form, _repr_html_ and save(), its picture drawn by
                 tfcli/draw/ (the pictures the command line draws too, with no terminal
                 library: typer and rich stay out of a notebook), imported inside the methods
    results.py   the results that trace an answer: Lens, Patching, Ablation, Heads, Steering
    attention.py Attention and Mask;  features.py FeatureShow and FeatureCards;  params.py Params
"""
