"""
Reduced from karpathy/nanoGPT@3adf61e154c3fe3fca428ad6bc3818b27a3b8291:data/shakespeare_char/prepare.py (MIT).
Kept: character vocabulary (sorted set), stoi/itos, 90/10 split, train.bin/val.bin as np.uint16, meta.pkl.
Changed: instead of downloading tinyshakespeare, a synthetic text (fixed seed, words built from a small
alphabet) of 120k characters is generated; everything is written under data_dir (the temp dir).
"""
import os
import pickle
import random

import numpy as np


def prepare(data_dir, n_chars=120_000, seed=1337):
    os.makedirs(data_dir, exist_ok=True)
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    words = [''.join(rng.choices(letters[:26], k=rng.randint(2, 8))) for _ in range(400)]
    parts, n = [], 0
    while n < n_chars:
        line = ' '.join(rng.choices(words, k=rng.randint(3, 12))).capitalize() + rng.choice('.,;:!?') + '\n'
        parts.append(line)
        n += len(line)
    data = ''.join(parts)[:n_chars]
    chars = sorted(list(set(data)))
    vocab_size = len(chars)
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    n = len(data)
    train_ids = np.array([stoi[c] for c in data[:int(n * 0.9)]], dtype=np.uint16)
    val_ids = np.array([stoi[c] for c in data[int(n * 0.9):]], dtype=np.uint16)
    train_ids.tofile(os.path.join(data_dir, 'train.bin'))
    val_ids.tofile(os.path.join(data_dir, 'val.bin'))
    with open(os.path.join(data_dir, 'meta.pkl'), 'wb') as f:
        pickle.dump({'vocab_size': vocab_size, 'itos': itos, 'stoi': stoi}, f)
    return data_dir
