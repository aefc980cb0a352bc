#include "tools/hvactor_bench/train/models.hpp"

#include <stdexcept>

namespace hvactor::bench_tool {

namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(
    nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

/// ResNet's bottleneck block (the v1.5 variant torchvision uses: the stride
/// sits on the 3x3 convolution): 1x1 -> 3x3 -> 1x1 (x4 channels), plus the
/// input, projected when its shape changes.
struct bottleneck_impl : nn::Module {
  bottleneck_impl(int64_t in, int64_t width, int64_t stride)
    : conv1(conv(in, width, 1, 1)), bn1(width), conv2(conv(width, width, 3, stride)), bn2(width),
      conv3(conv(width, width * 4, 1, 1)), bn3(width * 4) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    register_module("conv3", conv3);
    register_module("bn3", bn3);
    if (stride != 1 || in != width * 4)
      downsample = register_module(
        "downsample", nn::Sequential(conv(in, width * 4, 1, stride), nn::BatchNorm2d(width * 4)));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = torch::relu(bn2(conv2(y)));
    y = bn3(conv3(y));
    return torch::relu(y + (downsample ? downsample->forward(x) : x));
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Conv2d conv3;
  nn::BatchNorm2d bn3;
  nn::Sequential downsample{nullptr};
};
TORCH_MODULE_IMPL(bottleneck, bottleneck_impl);

struct resnet50_impl : nn::Module {
  explicit resnet50_impl(int64_t classes)
    : conv1(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)), bn1(64),
      fc(512 * 4, classes) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    int64_t in = 64;
    const int64_t blocks[] = {3, 4, 6, 3};
    for (int64_t stage = 0; stage < 4; ++stage) {
      int64_t width = int64_t{64} << stage;
      nn::Sequential layer;
      for (int64_t b = 0; b < blocks[stage]; ++b) {
        layer->push_back(bottleneck(in, width, b == 0 && stage > 0 ? 2 : 1));
        in = width * 4;
      }
      layers.push_back(register_module("layer" + std::to_string(stage + 1), layer));
    }
    register_module("fc", fc);
    // torchvision's initialization: He (fan_out) for convolutions, BN at
    // weight 1 and bias 0.
    for (auto& m : modules(false))
      if (auto* c = m->as<nn::Conv2d>())
        nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = torch::max_pool2d(y, 3, 2, 1);
    for (auto& layer : layers)
      y = layer->forward(y);
    y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
    return fc(y);
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  std::vector<nn::Sequential> layers;
  nn::Linear fc;
};
TORCH_MODULE_IMPL(resnet50, resnet50_impl);

} // namespace

int64_t resnet50_final_side(int64_t s) {
  auto down = [](int64_t side, int64_t kernel, int64_t pad) {
    return (side + 2 * pad - kernel) / 2 + 1;
  };
  s = down(s, 7, 3); // conv1
  s = down(s, 3, 1); // max pool
  for (int i = 0; i < 3; ++i)
    s = down(s, 3, 1); // layer2..4's strided 3x3
  return s;
}

model make_model(const std::string& name, int64_t image_size) {
  if (name == "resnet50") {
    auto m = resnet50(1000);
    return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); },
            {3, image_size, image_size}, 1000};
  }
  if (name == "mlp") {
    // benchmarks/train_step's MLP: 1024-1024-1024-10, ReLU.
    nn::Sequential m(nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(),
                     nn::Linear(1024, 10));
    return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); }, {1024}, 10};
  }
  throw std::invalid_argument("--model must be mlp or resnet50 (got '" + name + "')");
}

} // namespace hvactor::bench_tool
