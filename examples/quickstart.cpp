// quickstart: Ray Train's HorovodTrainer quickstart, line for line in C++
// on hvactor::train. Three workers on the embedded local cluster train a
// 1 -> 15 -> 1 MLP to learn y = x + 1, each on its shard of the dataset,
// with gradients averaged by hvd::distributed_optimizer; every epoch each
// worker reports its loss and rank 0's checkpoint is persisted by the
// driver. Prints the result.
//   ./quickstart [--epochs N] [--workers N] [--storage-path DIR] [--name NAME]
// (--num-cpus and --address are the runtime's options)

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include <hvactor/hvactor.hpp>
#include <hvactor/torch.hpp>

namespace hvd = hvactor::hvd;
namespace train = hvactor::train;

// If using GPUs, set this to true.
constexpr bool use_gpu = false;

constexpr int input_size = 1;
constexpr int layer_size = 15;
constexpr int output_size = 1;
int num_epochs = 3;

struct NeuralNetworkImpl : torch::nn::Module {
  NeuralNetworkImpl()
      : layer1(register_module("layer1", torch::nn::Linear(input_size, layer_size))),
        relu(register_module("relu", torch::nn::ReLU())),
        layer2(register_module("layer2", torch::nn::Linear(layer_size, output_size))) {
  }
  torch::Tensor forward(torch::Tensor input) {
    return layer2(relu(layer1(input)));
  }
  torch::nn::Linear layer1;
  torch::nn::ReLU relu;
  torch::nn::Linear layer2;
};
TORCH_MODULE(NeuralNetwork);

// --8<-- [start:worker]
void train_loop_per_worker(train::context& ctx) {
  hvd::init();
  auto& dataset_shard = train::get_dataset_shard("train");
  torch::set_num_threads(1); // several workers share this machine's cores
  NeuralNetwork model;
  // Horovod: every worker starts from rank 0's weights.
  hvd::broadcast_parameters(model->parameters(), 0);

  torch::nn::MSELoss loss_fn;
  double lr_scaler = 1;
  torch::optim::SGD sgd(model->parameters(), 0.1 * lr_scaler);
  // Horovod: wrap optimizer with DistributedOptimizer.
  hvd::distributed_optimizer optimizer(sgd);

  int epochs = static_cast<int>(ctx.config().at("num_epochs").as_int());
  for (int epoch = 0; epoch < epochs; ++epoch) {
    model->train();
    torch::Tensor loss;
    for (auto& batch : dataset_shard.iter_batches(32, {.dtype = train::dtype::float32})) {
      // Inputs and labels scaled by 1/32: plain SGD at lr 0.1 on x up to 31
      // diverges (Ray's Python original overflows the same way).
      torch::Tensor inputs = torch::unsqueeze(batch["x"], 1) / 32,
                    labels = torch::unsqueeze(batch["y"], 1) / 32;
      auto outputs = model->forward(inputs);
      loss = loss_fn(outputs, labels);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      std::printf("epoch: %d, loss: %f\n", epoch, loss.item<float>());
      std::fflush(stdout);
    }

    // Save a model checkpoint at the end of each epoch.
    // A fresh private folder (mkdtemp: 0700, made here), so that removing it
    // below removes only what this epoch wrote.
    auto pattern = (std::filesystem::temp_directory_path() / "quickstart-ckpt-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("cannot create a checkpoint folder in the temp dir");
    std::filesystem::path temp_checkpoint_dir = pattern;
    torch::save(model, (temp_checkpoint_dir / "model.pt").string());
    train::report({{"loss", loss.item<double>()}, {"epoch", epoch}},
                  train::checkpoint::from_directory(temp_checkpoint_dir.string()));
    std::filesystem::remove_all(temp_checkpoint_dir);
  }
}
// --8<-- [end:worker]

int main(int argc, char** argv) {
  // Enough CPUs for --workers on the embedded cluster, even on a 2-core
  // machine (a worker process is the same binary: scanning argv is all
  // that happens before the runtime takes over).
  int workers = 3;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--workers")
      workers = std::max(1, std::atoi(argv[i + 1]));
  hvactor::runtime rt{argc, argv, {.num_cpus = std::max(3, workers)}};
  std::string storage_path, name = "quickstart";
  auto& args = rt.args();
  for (size_t i = 1; i + 1 < args.size(); ++i) {
    if (args[i] == "--epochs")
      num_epochs = std::stoi(args[i + 1]);
    else if (args[i] == "--storage-path")
      storage_path = args[i + 1];
    else if (args[i] == "--name")
      name = args[i + 1];
  }
  try {
    // --8<-- [start:driver]
    std::vector<std::map<std::string, double>> items;
    for (int x = 0; x < 32; ++x)
      items.push_back({{"x", x}, {"y", x + 1}});
    auto train_dataset = train::dataset::from_items(items);
    train::scaling_config scaling_config{.num_workers = workers, .use_gpu = use_gpu};
    train::trainer trainer{rt,
                           &train_loop_per_worker,
                           {.scaling = scaling_config,
                            .datasets = {{"train", train_dataset}},
                            .run = {.name = name, .storage_path = storage_path},
                            .config = {{"num_epochs", num_epochs}}}};
    auto result = trainer.fit();
    // --8<-- [end:driver]
    std::cout << result << std::endl;
    return result.error ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quickstart failed: %s\n", e.what());
    return 1;
  }
}
