// Precompiled header: the LibTorch headers most translation units pull in.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
