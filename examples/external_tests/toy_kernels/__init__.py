"""A stand-in for a user's kernel package: kv_b LoRA step A (q side and v side) in plain torch.

``lora`` is the correct implementation; ``buggy`` carries one planted bug (it ignores the
batch's row permutation), which the example tests must catch.
"""
