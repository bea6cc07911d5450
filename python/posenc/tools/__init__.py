"""Tools built on the binding (they are not part of it):

    python -m posenc.tools.explore   figures: q.k decay, the sinusoidal table,
                                     wavelengths under each RoPE scaling
    python -m posenc.tools.pick      the encoding and rope_scaling to use for a
                                     training and a target context

(python -m posenc.explore and python -m posenc.pick remain as aliases.)
explore needs matplotlib (python3-matplotlib) for its figures.
"""
