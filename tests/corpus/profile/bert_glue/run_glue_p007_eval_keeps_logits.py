# Reduced from huggingface/transformers@a22a4378d97d06b7a1d9abad6e0086d30fdea199:
#   examples/pytorch/text-classification/run_glue_no_trainer.py (Apache-2.0), with the model reduced from
#   src/transformers/models/bert/modeling_bert.py (BertForSequenceClassification) built from a small random
#   BertConfig (no pretrained weights).
# Kept: DataCollatorWithPadding-style dynamic padding in collate_fn (dict items of python lists -> padded
#   tensors), DataLoader(train, shuffle=True, collate_fn, batch_size=8) and DataLoader(eval, collate_fn,
#   batch_size=8) with the default num_workers=0; AdamW with the no_decay parameter groups; linear schedule with
#   warmup; the training loop (model.train(); outputs = model(**batch); loss / gradient_accumulation_steps;
#   backward; optimizer.step(); lr_scheduler.step(); optimizer.zero_grad(); progress update;
#   completed_steps/max_train_steps); per epoch model.eval() and an evaluation loop with torch.no_grad() around
#   the model call, predictions = logits.argmax(-1), metric.add_batch(); metric.compute(); save at the end.
# Changed: transformers / datasets / evaluate / accelerate / tqdm are not installed and nothing may be
#   downloaded: the model is a torch-only BERT (embeddings, post-LN encoder layers with dropout 0.1, pooler,
#   classifier) from BertConfig(vocab 1000, hidden 128, 2 layers, 2 heads, intermediate 512); the "tokenized
#   GLUE" data are synthetic examples (lengths 8-64, fixed seed); accelerator.backward -> loss.backward,
#   accelerator.gather -> identity (one process); evaluate.load("accuracy") -> a small Accuracy class that
#   stores .tolist() of each batch; tqdm -> a print every 20 steps; save_pretrained -> torch.save of the
#   state_dict into the temp dir; num_train_epochs 3 -> 2, 320 train / 160 eval examples.
# VARIANT of run_glue_no_trainer.py: evaluation without torch.no_grad() keeps the logits of every batch (with their graph) to compute the metric once after the loop.
import argparse
import logging
import math
import os
import random
import tempfile
import types

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- model (modeling_bert, reduced)
class BertConfig:
    def __init__(self, vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=512, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 max_position_embeddings=128, type_vocab_size=2, layer_norm_eps=1e-12, num_labels=2,
                 initializer_range=0.02):
        self.__dict__.update(locals())
        del self.__dict__['self']


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids, token_type_ids):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        embeddings = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
                      + self.position_embeddings(position_ids))
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size) + attention_mask
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask):
        attn = self.dropout(self.attention_output(self.attention(hidden_states, attention_mask)))
        attention_output = self.attention_norm(attn + hidden_states)
        inter = nn.functional.gelu(self.intermediate(attention_output))
        return self.output_norm(self.dropout(self.output(inter)) + attention_output)


class BertForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.num_labels = config.num_labels
        self.embeddings = BertEmbeddings(config)
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None):
        extended_attention_mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        hidden_states = self.embeddings(input_ids, token_type_ids)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_attention_mask)
        pooled_output = torch.tanh(self.pooler(hidden_states[:, 0]))
        logits = self.classifier(self.dropout(pooled_output))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return types.SimpleNamespace(loss=loss, logits=logits)


# ----------------------------------------------------------------------------- data (datasets + tokenizer)
class SyntheticGlue(Dataset):
    """Stands for processed_datasets["train"/"validation"]: items are dicts of python lists, as after .map()."""

    def __init__(self, n, seed, vocab=1000):
        rng = random.Random(seed)
        self.items = []
        for _ in range(n):
            length = rng.randint(8, 64)
            ids = [101] + [rng.randrange(200, vocab) for _ in range(length - 2)] + [102]
            label = int(sum(ids) % 2)
            self.items.append({"input_ids": ids, "token_type_ids": [0] * length,
                               "attention_mask": [1] * length, "labels": label})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class DataCollatorWithPadding:
    def __init__(self, pad_token_id=0, pad_to_multiple_of=None):
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, features):
        max_len = max(len(f["input_ids"]) for f in features)
        if self.pad_to_multiple_of:
            max_len = -(-max_len // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = {k: [] for k in ("input_ids", "token_type_ids", "attention_mask")}
        for f in features:
            pad = max_len - len(f["input_ids"])
            batch["input_ids"].append(f["input_ids"] + [self.pad_token_id] * pad)
            batch["token_type_ids"].append(f["token_type_ids"] + [0] * pad)
            batch["attention_mask"].append(f["attention_mask"] + [0] * pad)
        batch = {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}
        batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
        return batch


class Accuracy:
    """Stands for evaluate.load("accuracy"): add_batch() stores python lists, compute() at the end."""

    def __init__(self):
        self.predictions, self.references = [], []

    def add_batch(self, predictions, references):
        self.predictions += predictions.tolist()
        self.references += references.tolist()

    def compute(self):
        correct = sum(int(p == r) for p, r in zip(self.predictions, self.references))
        result = {"accuracy": correct / max(1, len(self.references))}
        self.predictions, self.references = [], []
        return result


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step)
                   / float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def parse_args():
    parser = argparse.ArgumentParser(description="Finetune a transformers model on a text classification task")
    parser.add_argument("--per_device_train_batch_size", type=int, default=8)
    parser.add_argument("--per_device_eval_batch_size", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--weight_decay", type=float, default=0.0)
    parser.add_argument("--num_train_epochs", type=int, default=2)
    parser.add_argument("--max_train_steps", type=int, default=None)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    parser.add_argument("--num_warmup_steps", type=int, default=0)
    parser.add_argument("--output_dir", type=str, default=os.path.join(tempfile.gettempdir(), "corpus-glue-out"))
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def main():
    args = parse_args()
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    config = BertConfig(num_labels=2)
    model = BertForSequenceClassification(config)

    train_dataset = SyntheticGlue(320, seed=1)
    eval_dataset = SyntheticGlue(160, seed=2)

    # Log a few random samples from the training set:
    for index in random.sample(range(len(train_dataset)), 3):
        logger.info(f"Sample {index} of the training set: {train_dataset[index]}.")

    data_collator = DataCollatorWithPadding(pad_to_multiple_of=None)

    train_dataloader = DataLoader(
        train_dataset, shuffle=True, collate_fn=data_collator, batch_size=args.per_device_train_batch_size
    )
    eval_dataloader = DataLoader(eval_dataset, collate_fn=data_collator, batch_size=args.per_device_eval_batch_size)

    # Optimizer
    # Split weights in two groups, one with weight decay and the other not.
    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {
            "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
            "weight_decay": args.weight_decay,
        },
        {
            "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate)

    # Scheduler and math around the number of training steps.
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    if args.max_train_steps is None:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
    args.num_train_epochs = math.ceil(args.max_train_steps / num_update_steps_per_epoch)

    lr_scheduler = get_linear_schedule_with_warmup(
        optimizer=optimizer,
        num_warmup_steps=args.num_warmup_steps,
        num_training_steps=args.max_train_steps,
    )

    metric = Accuracy()

    # Train!
    total_batch_size = args.per_device_train_batch_size * args.gradient_accumulation_steps

    logger.info("***** Running training *****")
    logger.info(f"  Num examples = {len(train_dataset)}")
    logger.info(f"  Num Epochs = {args.num_train_epochs}")
    logger.info(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    logger.info(f"  Total train batch size (w. parallel, distributed & accumulation) = {total_batch_size}")
    logger.info(f"  Gradient Accumulation steps = {args.gradient_accumulation_steps}")
    logger.info(f"  Total optimization steps = {args.max_train_steps}")
    completed_steps = 0

    for epoch in range(args.num_train_epochs):
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            loss = loss / args.gradient_accumulation_steps
            loss.backward()
            if step % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                completed_steps += 1
                if completed_steps % 20 == 0:
                    print(f"step {completed_steps}/{args.max_train_steps}")

            if completed_steps >= args.max_train_steps:
                break

        model.eval()
        all_logits, all_labels = [], []
        for step, batch in enumerate(eval_dataloader):
            outputs = model(**batch)  # PLANTED: P003 evaluation without torch.no_grad() (model.eval() is called)
            all_logits.append(outputs.logits)  # PLANTED: P007 logits kept with their autograd graph for the whole evaluation
            all_labels.append(batch["labels"])
        predictions = torch.cat(all_logits).argmax(dim=-1)
        metric.add_batch(
            predictions=predictions,
            references=torch.cat(all_labels),
        )

        eval_metric = metric.compute()
        logger.info(f"epoch {epoch}: {eval_metric}")

    if args.output_dir is not None:
        os.makedirs(args.output_dir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(args.output_dir, "pytorch_model.bin"))


if __name__ == "__main__":
    main()
