# Reduced from pytorch/examples@77f55b912142e11fcfdf5b530231fb9c52f181e8:word_language_model/data.py
# (BSD-3-Clause). Kept: Dictionary and Corpus.tokenize (two passes over each file, one int64 tensor per line,
# torch.cat). Added: make_synthetic_corpus(), which writes train/valid/test.txt with a fixed seed (Zipf-like
# word frequencies) so that nothing is downloaded; the shipped wikitext-2 train.txt is not in the snapshot.
import os
import random
from io import open

import torch


class Dictionary(object):
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus(object):
    def __init__(self, path):
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, 'train.txt'))
        self.valid = self.tokenize(os.path.join(path, 'valid.txt'))
        self.test = self.tokenize(os.path.join(path, 'test.txt'))

    def tokenize(self, path):
        """Tokenizes a text file."""
        assert os.path.exists(path)
        # Add words to the dictionary
        with open(path, 'r', encoding="utf8") as f:
            for line in f:
                words = line.split() + ['<eos>']
                for word in words:
                    self.dictionary.add_word(word)

        # Tokenize file content
        with open(path, 'r', encoding="utf8") as f:
            idss = []
            for line in f:
                words = line.split() + ['<eos>']
                ids = []
                for word in words:
                    ids.append(self.dictionary.word2idx[word])
                idss.append(torch.tensor(ids).type(torch.int64))
            ids = torch.cat(idss)

        return ids


def make_synthetic_corpus(path, vocab=1000, tokens=(20000, 10000, 10000), seed=1111):
    """Write train/valid/test.txt (wikitext-2 layout) with Zipf-like word frequencies."""
    os.makedirs(path, exist_ok=True)
    rng = random.Random(seed)
    words = ['w%d' % i for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]
    for name, n in zip(('train.txt', 'valid.txt', 'test.txt'), tokens):
        fn = os.path.join(path, name)
        with open(fn, 'w', encoding='utf8') as f:
            written = 0
            while written < n:
                k = rng.randint(5, 25)
                f.write(' ' + ' '.join(rng.choices(words, weights, k=k)) + ' \n')
                written += k + 1
    return path
