"""
Sample from a trained model
Reduced from karpathy/nanoGPT@3adf61e154c3fe3fca428ad6bc3818b27a3b8291:sample.py (MIT).
Kept: init_from='resume' (torch.load of ckpt.pt, GPT(GPTConfig(**model_args)), unwanted '_orig_mod.' prefix
fix, load_state_dict), model.eval(), meta.pkl encode/decode, start="\\n", x of shape (1, t), and under
torch.no_grad() + ctx: for each of num_samples samples one model.generate() call (batch 1, one forward per
token inside generate) then decode(y[0].tolist()).
Changed: the checkpoint is normally written by train.py; _corpus_setup() writes one from an untrained GPT with
train.py's default model_args into the temp dir when it is missing, and prepare.py writes the synthetic
dataset (nothing is downloaded); max_new_tokens 500 -> 100 so that it runs in seconds; device 'cuda' -> 'cpu',
dtype 'float32'; the gpt2/tiktoken branch is removed (no download, tiktoken not installed).
"""
import os
import pickle
import tempfile
from contextlib import nullcontext

import torch

from model import GPTConfig, GPT
from prepare import prepare

# -----------------------------------------------------------------------------
init_from = 'resume'  # either 'resume' (from an out_dir) or a gpt2 variant (e.g. 'gpt2-xl')
out_dir = os.path.join(tempfile.gettempdir(), 'corpus-sample-shakespeare-char')
start = "\n"  # or "<|endoftext|>" or etc. Can also specify a file, use as: "FILE:prompt.txt"
num_samples = 10  # number of samples to draw
max_new_tokens = 100  # number of tokens generated in each sample
temperature = 0.8  # 1.0 = no change, < 1.0 = less random, > 1.0 = more random, in predictions
top_k = 200  # retain only the top_k most likely tokens, clamp others to have 0 probability
seed = 1337
device = 'cpu'  # examples: 'cpu', 'cuda', 'cuda:0', 'cuda:1', etc.
dtype = 'float32'
compile = False  # use PyTorch 2.0 to compile the model to be faster
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'configurator.py')).read())
# -----------------------------------------------------------------------------
data_root = os.path.join(tempfile.gettempdir(), 'corpus-data')


def _corpus_setup():
    """Corpus setup (not in the original): write the checkpoint train.py would have written."""
    data_dir = prepare(os.path.join(data_root, 'shakespeare_char'))
    ckpt_path = os.path.join(out_dir, 'ckpt.pt')
    if not os.path.exists(ckpt_path):
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(data_dir, 'meta.pkl'), 'rb') as f:
            vocab_size = pickle.load(f)['vocab_size']
        model_args = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, bias=False,
                          vocab_size=vocab_size, dropout=0.2)
        torch.save({'model': GPT(GPTConfig(**model_args)).state_dict(), 'model_args': model_args,
                    'config': {'dataset': 'shakespeare_char'}}, ckpt_path)


_corpus_setup()

torch.manual_seed(seed)
device_type = 'cuda' if 'cuda' in device else 'cpu'  # for later use in torch.autocast
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

# model
if init_from == 'resume':
    # init from a model saved in a specific directory
    ckpt_path = os.path.join(out_dir, 'ckpt.pt')
    checkpoint = torch.load(ckpt_path, map_location=device)
    gptconf = GPTConfig(**checkpoint['model_args'])
    model = GPT(gptconf)
    state_dict = checkpoint['model']
    unwanted_prefix = '_orig_mod.'
    for k, v in list(state_dict.items()):
        if k.startswith(unwanted_prefix):
            state_dict[k[len(unwanted_prefix):]] = state_dict.pop(k)
    model.load_state_dict(state_dict)

model.eval()
model.to(device)
if compile:
    model = torch.compile(model)  # requires PyTorch 2.0 (optional)

# look for the meta pickle in case it is available in the dataset folder
load_meta = False
if init_from == 'resume' and 'config' in checkpoint and 'dataset' in checkpoint['config']:
    meta_path = os.path.join(data_root, checkpoint['config']['dataset'], 'meta.pkl')
    load_meta = os.path.exists(meta_path)
if load_meta:
    print(f"Loading meta from {meta_path}...")
    with open(meta_path, 'rb') as f:
        meta = pickle.load(f)
    stoi, itos = meta['stoi'], meta['itos']
    encode = lambda s: [stoi[c] for c in s]
    decode = lambda l: ''.join([itos[i] for i in l])
else:
    raise SystemExit("corpus copy: the GPT-2 (tiktoken) encoding is not available")

# encode the beginning of the prompt
if start.startswith('FILE:'):
    with open(start[5:], 'r', encoding='utf-8') as f:
        start = f.read()
start_ids = encode(start)
x = (torch.tensor(start_ids, dtype=torch.long, device=device)[None, ...])

# run generation
with torch.no_grad():
    with ctx:
        for k in range(num_samples):
            y = model.generate(x, max_new_tokens, temperature=temperature, top_k=top_k)
            print(decode(y[0].tolist()))
            print('---------------')
