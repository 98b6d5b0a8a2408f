###############################################################################
# Language Modeling on Wikitext-2
#
# This file generates new sentences sampled from the language model.
#
###############################################################################
# Reduced from pytorch/examples@77f55b912142e11fcfdf5b530231fb9c52f181e8:word_language_model/generate.py
# (BSD-3-Clause). Kept: torch.load of the whole model (safe_globals) then model.eval(); the corpus dictionary;
# init_hidden(1); input of shape (1, 1) (seq-first, one stream); under torch.no_grad() one model call per word,
# word_weights ... .exp().cpu(), torch.multinomial, input.fill_(word_idx), one written word per step and a log
# line every --log-interval words. This is single-stream autoregressive generation: each step needs the previous
# step's word, so the batch of 1 cannot be batched.
# Changed: the checkpoint is normally written by main.py; _corpus_setup() below makes one from an untrained
#   RNNModel (same architecture and vocabulary as main.py's defaults) in the temp dir when it is missing, and
#   the corpus is the synthetic one of data.make_synthetic_corpus(); --outf defaults to the temp dir; the
#   Transformer branch is removed (model.py has the RNN model only).
import argparse
import os
import tempfile

import torch

import data
from model import RNNModel

parser = argparse.ArgumentParser(description='PyTorch Wikitext-2 Language Model')
# Model parameters.
parser.add_argument('--data', type=str, default=os.path.join(tempfile.gettempdir(), 'corpus-wikitext-synthetic'),
                    help='location of the data corpus')
parser.add_argument('--checkpoint', type=str, default=os.path.join(tempfile.gettempdir(), 'corpus-wlm-generate.pt'),
                    help='model checkpoint to use')
parser.add_argument('--outf', type=str, default=os.path.join(tempfile.gettempdir(), 'corpus-wlm-generated.txt'),
                    help='output file for generated text')
parser.add_argument('--words', type=int, default='1000',
                    help='number of words to generate')
parser.add_argument('--seed', type=int, default=1111,
                    help='random seed')
parser.add_argument('--temperature', type=float, default=1.0,
                    help='temperature - higher will increase diversity')
parser.add_argument('--log-interval', type=int, default=100,
                    help='reporting interval')
parser.add_argument('--accel', action='store_true', default=False,
                    help='use accelerator')
args = parser.parse_args()


def _corpus_setup():
    """Corpus setup (not in the original): write the checkpoint main.py would have written."""
    data.make_synthetic_corpus(args.data)
    if not os.path.exists(args.checkpoint):
        ntok = len(data.Corpus(args.data).dictionary)
        torch.save(RNNModel('LSTM', ntok, 200, 200, 2, 0.2), args.checkpoint)


_corpus_setup()

# Set the random seed manually for reproducibility.
torch.manual_seed(args.seed)

if args.accel and torch.accelerator.is_available():
    device = torch.accelerator.current_accelerator()
else:
    device = torch.device("cpu")

if args.temperature < 1e-3:
    parser.error("--temperature has to be greater or equal 1e-3.")

with open(args.checkpoint, 'rb') as f:
    safe_globals = [
        RNNModel,
        torch.nn.modules.dropout.Dropout,
        torch.nn.modules.linear.Linear,
        torch.nn.modules.sparse.Embedding,
        torch.nn.modules.rnn.GRU,
        torch.nn.modules.rnn.LSTM,
        torch.nn.modules.rnn.RNN,
    ]
    with torch.serialization.safe_globals(safe_globals):
        model = torch.load(f, map_location=device)
model.eval()

corpus = data.Corpus(args.data)
ntokens = len(corpus.dictionary)

hidden = model.init_hidden(1)
input = torch.randint(ntokens, (1, 1), dtype=torch.long).to(device)

with open(args.outf, 'w') as outf:
    with torch.no_grad():  # no tracking history
        for i in range(args.words):
            output, hidden = model(input, hidden)
            word_weights = output.squeeze().div(args.temperature).exp().cpu()
            word_idx = torch.multinomial(word_weights, 1)[0]
            input.fill_(word_idx)

            word = corpus.dictionary.idx2word[word_idx]

            outf.write(word + ('\n' if i % 20 == 19 else ' '))

            if i % args.log_interval == 0:
                print('| Generated {}/{} words'.format(i, args.words))
