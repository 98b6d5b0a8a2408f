# torch-only stand-in for the parts of torchvision that the corpus scripts use.
#
# Why: torchvision is not installable next to torch==2.13.0+cpu in this environment, and nothing may be
# downloaded at run time. Each piece below reproduces the behaviour that matters for profiling, written
# from (not copied from) pytorch/vision@main:
#   torchvision/datasets/mnist.py      MNIST.__getitem__: uint8 tensor -> PIL "L" image -> transform, per item
#   torchvision/datasets/fakedata.py   FakeData.__getitem__: reseeds per index, randn -> ToPILImage -> transform,
#                                      target read with .item() (a host read inside data loading)
#   torchvision/transforms/transforms.py  Compose and ToTensor/ToPILImage are plain classes; Normalize,
#                                      RandomHorizontalFlip, RandomCrop are torch.nn.Module subclasses called
#                                      once per item (this is what makes them look like models to a profiler)
#   torchvision/transforms/functional.py  to_tensor / normalize arithmetic (clone, sub_, div_)
#   torchvision/models/resnet.py       BasicBlock / ResNet / resnet18 architecture (11.7M parameters)
#   torchvision/utils.py               make_grid + save_image (reduced: PIL grid, no padding options)
# Data is synthetic, generated in code with a fixed seed (class-dependent templates plus noise) instead of the
# downloaded MNIST / FashionMNIST files; dataset sizes are reduced (MNIST 6400/1000 items, FashionMNIST 4000/10000)
# so that each script runs in seconds on CPU.
# Note for judging "whose line": in a real run these lines live in site-packages/torchvision; here they live in
# this file next to the scripts.
import math
import types

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

# --------------------------------------------------------------------------- transforms


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class ToTensor:
    """PIL image / HWC uint8 ndarray -> float CHW tensor in [0, 1] (not an nn.Module, as in torchvision)."""

    def __call__(self, pic):
        if isinstance(pic, np.ndarray):
            arr = pic if pic.ndim == 3 else pic[:, :, None]
            img = torch.from_numpy(arr.transpose((2, 0, 1))).contiguous()
            return img.to(dtype=torch.get_default_dtype()).div(255)
        nchan = len(pic.getbands())
        img = torch.from_numpy(np.array(pic, np.uint8, copy=True))
        img = img.view(pic.size[1], pic.size[0], nchan)
        img = img.permute((2, 0, 1)).contiguous()
        return img.to(dtype=torch.get_default_dtype()).div(255)


class ToPILImage:
    def __call__(self, pic):
        if pic.is_floating_point():
            pic = pic.mul(255).byte()
        npimg = np.transpose(pic.cpu().numpy(), (1, 2, 0))
        if npimg.shape[2] == 1:
            return Image.fromarray(npimg[:, :, 0])
        return Image.fromarray(npimg)


class Normalize(nn.Module):
    def __init__(self, mean, std, inplace=False):
        super().__init__()
        self.mean = mean
        self.std = std
        self.inplace = inplace

    def forward(self, tensor):
        if not self.inplace:
            tensor = tensor.clone()
        mean = torch.as_tensor(self.mean, dtype=tensor.dtype, device=tensor.device)
        std = torch.as_tensor(self.std, dtype=tensor.dtype, device=tensor.device)
        if mean.ndim == 1:
            mean = mean.view(-1, 1, 1)
        if std.ndim == 1:
            std = std.view(-1, 1, 1)
        return tensor.sub_(mean).div_(std)


class RandomHorizontalFlip(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, img):
        if torch.rand(1) < self.p:
            if isinstance(img, torch.Tensor):
                return img.flip(-1)
            return img.transpose(Image.FLIP_LEFT_RIGHT)
        return img


class RandomCrop(nn.Module):
    def __init__(self, size, padding=None):
        super().__init__()
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.padding = padding

    def forward(self, img):
        w, h = img.size
        if self.padding:
            p = self.padding
            canvas = Image.new(img.mode, (w + 2 * p, h + 2 * p))
            canvas.paste(img, (p, p))
            img, w, h = canvas, w + 2 * p, h + 2 * p
        th, tw = self.size
        i = torch.randint(0, h - th + 1, size=(1,)).item()
        j = torch.randint(0, w - tw + 1, size=(1,)).item()
        return img.crop((j, i, j + tw, i + th))


transforms = types.SimpleNamespace(
    Compose=Compose, ToTensor=ToTensor, ToPILImage=ToPILImage, Normalize=Normalize,
    RandomHorizontalFlip=RandomHorizontalFlip, RandomCrop=RandomCrop,
)

# --------------------------------------------------------------------------- datasets


def _synthetic_images(n, classes, shape, seed):
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand((classes,) + shape, generator=g) * 255
    targets = torch.randint(0, classes, (n,), generator=g)
    noise = torch.randn((n,) + shape, generator=g) * 48
    data = (templates[targets] + noise).clamp_(0, 255).to(torch.uint8)
    return data, targets


class MNIST(torch.utils.data.Dataset):
    """Same item path as torchvision.datasets.MNIST; synthetic digits instead of the downloaded files."""

    # sizes are class attributes so that a script can reduce them (each script says so in its header)
    n_train, n_test, seed = 6400, 1000, 0

    def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
        self.root = root
        self.train = train
        self.transform = transform
        self.target_transform = target_transform
        n = self.n_train if train else self.n_test
        self.data, self.targets = _synthetic_images(n, 10, (28, 28), self.seed + (0 if train else 1))

    def __getitem__(self, index):
        img, target = self.data[index], int(self.targets[index])
        # doing this so that it is consistent with all other datasets to return a PIL Image
        img = Image.fromarray(img.numpy())
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target

    def __len__(self):
        return len(self.data)


class FashionMNIST(MNIST):
    # torchvision's FashionMNIST has 60000/10000 items; the validation split keeps its real size (10000)
    n_train, n_test, seed = 4000, 10000, 10


class FakeData(torch.utils.data.Dataset):
    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None,
                 target_transform=None, random_offset=0):
        self.size = size
        self.num_classes = num_classes
        self.image_size = image_size
        self.transform = transform
        self.target_transform = target_transform
        self.random_offset = random_offset

    def __getitem__(self, index):
        if index >= len(self):
            raise IndexError(f"{self.__class__.__name__} index out of range")
        rng_state = torch.get_rng_state()
        torch.manual_seed(index + self.random_offset)
        img = torch.randn(*self.image_size)
        target = torch.randint(0, self.num_classes, size=(1,), dtype=torch.long)[0]
        torch.set_rng_state(rng_state)
        img = ToPILImage()(img)
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target.item()

    def __len__(self):
        return self.size


datasets = types.SimpleNamespace(MNIST=MNIST, FashionMNIST=FashionMNIST, FakeData=FakeData)

# --------------------------------------------------------------------------- utils


def make_grid(tensor, nrow=8):
    if tensor.dim() == 3:
        tensor = tensor.unsqueeze(0)
    n, c, h, w = tensor.shape
    if c == 1:
        tensor = tensor.expand(n, 3, h, w)
    xmaps = min(nrow, n)
    ymaps = int(math.ceil(float(n) / xmaps))
    grid = tensor.new_zeros((3, h * ymaps, w * xmaps))
    for k in range(n):
        y, x = divmod(k, xmaps)
        grid[:, y * h:(y + 1) * h, x * w:(x + 1) * w] = tensor[k]
    return grid


@torch.no_grad()
def save_image(tensor, fp, nrow=8):
    grid = make_grid(tensor, nrow=nrow)
    ndarr = grid.mul(255).add_(0.5).clamp_(0, 255).permute(1, 2, 0).to("cpu", torch.uint8).numpy()
    Image.fromarray(ndarr).save(fp)


utils = types.SimpleNamespace(make_grid=make_grid, save_image=save_image)

# --------------------------------------------------------------------------- models (resnet18)


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(pretrained=False, **kwargs):
    if pretrained:
        raise RuntimeError("no pretrained weights: nothing may be downloaded in this corpus")
    return ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)


models = types.SimpleNamespace(resnet18=resnet18)
