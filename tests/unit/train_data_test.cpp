// hvactor::train's data layer alone: sharding properties (any rows, any
// world size), batches, CSV, the byte forms of shards, metrics and
// chunked values and checkpoint streams through a store (round trips, a cut stream).

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

#include <doctest/doctest.h>

#include "hvactor/train.hpp"
#include "train/internal/byte_codec.hpp"
#include "train/internal/shard_bytes.hpp"
#include "train/internal/train_protocol.hpp"

namespace fs = std::filesystem;
namespace train = hvactor::train;

namespace {

train::dataset iota_rows(int64_t n) {
  std::vector<double> xs(static_cast<size_t>(n));
  std::iota(xs.begin(), xs.end(), 0.0);
  std::vector<int64_t> ids(xs.begin(), xs.end());
  return train::dataset::from_tensors({{"x", train::column{xs}}, {"id", train::column{ids}}});
}

struct scratch {
  fs::path path = fs::temp_directory_path() / ("hvactor-train-unit-" + std::to_string(::getpid()));
  scratch() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~scratch() {
    fs::remove_all(path);
  }
};

/// 210 (rows, world size) pairs: the edges, then random ones up to 5,000
/// rows and 100 ranks.
std::vector<std::pair<int64_t, int>> shard_cases() {
  std::mt19937 rng{7};
  std::vector<std::pair<int64_t, int>> cases{{0, 1}, {0, 5}, {1, 1}, {1, 4}, {2, 3}, {32, 3},
                                             {100, 3}, {7, 7}, {7, 8}, {1000, 64}};
  for (int i = 0; i < 200; ++i)
    cases.emplace_back(std::uniform_int_distribution<int64_t>{0, 5000}(rng),
                       std::uniform_int_distribution<int>{1, 100}(rng));
  return cases;
}

/// Every rank's row ids, in rank order; checks that each shard's columns
/// agree row by row and that shard() and shard_bounds() agree.
std::vector<std::vector<int64_t>> shard_ids(int64_t rows, int size, train::data_config how) {
  auto ds = iota_rows(rows);
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < size; ++r) {
    auto shard = ds.shard(r, size, how);
    auto ids = shard["id"].values<int64_t>();
    REQUIRE(static_cast<int64_t>(ids.size()) == shard.count());
    auto xs = shard["x"].values<double>();
    for (size_t k = 0; k < xs.size(); ++k)
      CHECK(xs[k] == static_cast<double>(ids[k]));
    auto [begin, end] = train::dataset::shard_bounds(rows, r, size, how);
    CHECK(end - begin == shard.count());
    if (shard.count() > 0)
      CHECK(ids[0] == begin);
    out.emplace_back(ids.begin(), ids.end());
  }
  return out;
}

} // namespace

TEST_CASE("equal shards (the default): for any rows and world size, rows / size contiguous rows "
          "each, the last rows % size rows dropped, nothing duplicated") {
  for (auto [rows, size] : shard_cases()) {
    CAPTURE(rows);
    CAPTURE(size);
    auto shards = shard_ids(rows, size, {});
    int64_t each = rows / size;
    int64_t expected_next = 0;
    for (auto& ids : shards) {
      CHECK(static_cast<int64_t>(ids.size()) == each); // every rank the same
      for (auto id : ids)
        CHECK(id == expected_next++); // contiguous, in rank order: no duplicate
    }
    // Exactly rows [0, size * each) are kept: the dropped ones are the last
    // rows % size.
    CHECK(expected_next == rows - rows % size);
    // The default is the equal split.
    CHECK(shards == shard_ids(rows, size, {.equal = true}));
  }
  // Ray's split(n, equal=True): 100 rows over 3 ranks are 33 each from rows
  // 0, 33, 66; row 99 is dropped. Fewer rows than ranks: every shard empty.
  CHECK(train::dataset::shard_bounds(100, 2, 3) == std::pair<int64_t, int64_t>{66, 99});
  CHECK(iota_rows(3).shard(3, 4).count() == 0);
  CHECK(iota_rows(3).shard(0, 4).count() == 0);
  CHECK_THROWS_AS(iota_rows(10).shard(3, 3), std::invalid_argument);
  CHECK_THROWS_AS(iota_rows(10).shard(0, 0), std::invalid_argument);
  CHECK_THROWS_AS(iota_rows(10).shard(-1, 3), std::invalid_argument);
}

TEST_CASE("shards with equal = false: for any rows and world size, contiguous shares within one "
          "row of each other, covering every row once") {
  train::data_config keep_all{.equal = false};
  for (auto [rows, size] : shard_cases()) {
    CAPTURE(rows);
    CAPTURE(size);
    int64_t smallest = rows, largest = 0;
    int64_t expected_next = 0;
    for (auto& ids : shard_ids(rows, size, keep_all)) {
      smallest = std::min(smallest, static_cast<int64_t>(ids.size()));
      largest = std::max(largest, static_cast<int64_t>(ids.size()));
      for (auto id : ids)
        CHECK(id == expected_next++); // contiguous, in rank order: no duplicate
    }
    CHECK(expected_next == rows); // nothing dropped
    CHECK(largest - smallest <= 1);
  }
  // 100 rows over 3 ranks: 34, 33, 33 from rows 0, 34, 67.
  CHECK(train::dataset::shard_bounds(100, 0, 3, keep_all) == std::pair<int64_t, int64_t>{0, 34});
  CHECK(train::dataset::shard_bounds(100, 2, 3, keep_all) == std::pair<int64_t, int64_t>{67, 100});
  CHECK_THROWS_AS(iota_rows(10).shard(3, 3, keep_all), std::invalid_argument);
  CHECK_THROWS_AS(iota_rows(10).shard(0, 0, keep_all), std::invalid_argument);
}

TEST_CASE("iter_batches: sizes, drop_last, a seeded shuffle is a permutation, dtype") {
  auto ds = iota_rows(10);
  std::vector<int64_t> sizes;
  for (auto& b : ds.iter_batches(4))
    sizes.push_back(b.rows());
  CHECK(sizes == std::vector<int64_t>{4, 4, 2});
  sizes.clear();
  for (auto& b : ds.iter_batches(4, {.drop_last = true}))
    sizes.push_back(b.rows());
  CHECK(sizes == std::vector<int64_t>{4, 4});
  CHECK(ds.iter_batches(20).size() == 1);
  CHECK(ds.iter_batches(20, {.drop_last = true}).size() == 0);
  auto none = iota_rows(0).iter_batches(3);
  CHECK(none.begin() == none.end());

  auto order = [&](int64_t seed) {
    std::vector<int64_t> ids;
    for (auto& b : ds.iter_batches(3, {.shuffle = true, .seed = seed}))
      for (auto id : b["id"].values<int64_t>())
        ids.push_back(id);
    return ids;
  };
  auto a = order(1), b = order(1), c = order(2);
  CHECK(a == b);
  CHECK(a != c);
  std::sort(c.begin(), c.end());
  std::vector<int64_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  CHECK(c == all);

  for (auto& batch : ds.iter_batches(5, {.dtype = train::dtype::float32})) {
    CHECK(batch["x"].type() == train::dtype::float32);
    CHECK(batch["id"].values<float>()[0] == batch["x"].values<float>()[0]);
  }
  CHECK_THROWS_AS(ds.iter_batches(0), std::invalid_argument);
  auto first = *ds.iter_batches(2).begin();
  CHECK_THROWS_WITH_AS(first["nope"], "train::batch: no column 'nope' (it has 'id', 'x')",
                       std::out_of_range);
  CHECK_THROWS_AS(first["x"].values<int64_t>(), std::invalid_argument);
}

TEST_CASE("from_items, from_tensors, from_csv: the rows, and clear errors") {
  auto ds = train::dataset::from_items({{{"x", 1}, {"y", 2}}, {{"x", 3}, {"y", 4}}});
  CHECK(ds.count() == 2);
  CHECK(ds.column_names() == std::vector<std::string>{"x", "y"});
  CHECK(ds["y"].values<double>()[1] == 4);
  CHECK_THROWS_WITH_AS(train::dataset::from_items({{{"x", 1}}, {{"z", 1}}}),
                       "train::dataset::from_items: row 1 does not have the names of row 0",
                       std::invalid_argument);
  CHECK_THROWS_AS(train::dataset::from_tensors({{"a", train::column{std::vector<double>{1, 2}}},
                                                {"b", train::column{std::vector<double>{1}}}}),
                  std::invalid_argument);
  // A column of rows with a shape of their own: 3 rows of 2 x 2 floats.
  std::vector<std::byte> raw(3 * 4 * sizeof(float));
  train::column images{train::dtype::float32, {2, 2}, raw};
  CHECK(images.rows() == 3);
  CHECK(images.shape() == std::vector<int64_t>{3, 2, 2});
  CHECK(images.slice(1, 3).rows() == 2);
  CHECK_THROWS_AS((train::column{train::dtype::float32, {3}, std::vector<std::byte>(5)}),
                  std::invalid_argument);
  // A shape whose row size overflows (as a peer's bytes could announce).
  CHECK_THROWS_AS((train::column{train::dtype::float64, {int64_t{1} << 40, int64_t{1} << 40}, {}}),
                  std::invalid_argument);
  // A huge batch size is one batch, not an overflow.
  CHECK(iota_rows(10).iter_batches(INT64_MAX).size() == 1);

  scratch dir;
  auto csv = dir.path / "data.csv";
  std::ofstream{csv} << "x, y\n1,2\n\n3.5, -4e1\n";
  auto d = train::dataset::from_csv(csv.string());
  CHECK(d.count() == 2);
  CHECK(d["x"].values<double>()[1] == 3.5);
  CHECK(d["y"].values<double>()[1] == -40);
  std::ofstream{csv} << "x,y\n1,2\n3,abc\n";
  CHECK_THROWS_WITH_AS(train::dataset::from_csv(csv.string()),
                       doctest::Contains(":3: 'abc' in column 'y' is not a number"),
                       std::invalid_argument);
  std::ofstream{csv} << "x,y\n1,2,3\n";
  CHECK_THROWS_WITH_AS(train::dataset::from_csv(csv.string()),
                       doctest::Contains(":2: 3 cells, the header has 2"), std::invalid_argument);
  CHECK_THROWS_AS(train::dataset::from_csv((dir.path / "missing.csv").string()), hvactor::error);
}

TEST_CASE("from_csv: a directory, a huge header, a wide file and a long line") {
  scratch dir;
  // A directory is named as such (it said "has no header line").
  CHECK_THROWS_WITH_AS(train::dataset::from_csv(dir.path.string()),
                       doctest::Contains("it is a directory"), hvactor::error);
  auto csv = dir.path / "wide.csv";
  // 400,000 distinct columns: the duplicate check is linear (pairwise, it
  // took minutes), and a repeated name at the end is still found.
  constexpr int wide = 400000;
  {
    std::ofstream out{csv};
    for (int i = 0; i < wide; ++i)
      out << (i ? "," : "") << "c" << i;
    out << "\n";
    for (int i = 0; i < wide; ++i)
      out << (i ? "," : "") << i;
    out << "\n";
  }
  auto start = std::chrono::steady_clock::now();
  auto d = train::dataset::from_csv(csv.string());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(d.column_names().size() == wide);
  CHECK(d["c399999"].values<double>()[0] == 399999);
  {
    std::ofstream out{csv};
    for (int i = 0; i < wide; ++i)
      out << "c" << i << ",";
    out << "c7\n1\n";
  }
  start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(train::dataset::from_csv(csv.string()),
                       doctest::Contains(":1: column 'c7' appears twice"), std::invalid_argument);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  // A header line over 8 MiB (here 32 MiB without a newline) is refused,
  // naming the limit, without reading the rest.
  std::ofstream{csv} << std::string(size_t{32} << 20, 'a');
  CHECK_THROWS_WITH_AS(train::dataset::from_csv(csv.string()),
                       doctest::Contains(":1: the header line is longer than 8388608 bytes"),
                       std::invalid_argument);
  // A data line longer than its columns can need.
  std::ofstream{csv} << "x\n1\n" << std::string(size_t{9} << 20, '1') << "\n";
  CHECK_THROWS_WITH_AS(train::dataset::from_csv(csv.string()),
                       doctest::Contains(":3: the line is longer than"), std::invalid_argument);
  // Empty and blank files.
  std::ofstream{csv} << "\n  \n";
  CHECK_THROWS_WITH_AS(train::dataset::from_csv(csv.string()),
                       doctest::Contains("has no header line"), std::invalid_argument);
  // The last line without a newline is read.
  std::ofstream{csv} << "x,y\n1,2\n3,4";
  CHECK(train::dataset::from_csv(csv.string()).count() == 2);
}

TEST_CASE("a shard's byte form round-trips; truncated or garbled bytes are errors") {
  auto ds = iota_rows(1000);
  auto bytes = ds.to_bytes();
  auto back = train::dataset::from_bytes(bytes);
  CHECK(back.count() == 1000);
  CHECK(back["id"].values<int64_t>()[999] == 999);
  CHECK(back["x"].values<double>()[500] == 500.0);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{10}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<char> part(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(cut));
    CHECK_THROWS_AS(train::dataset::from_bytes(part), hvactor::error);
  }
  std::mt19937 rng{3};
  for (int i = 0; i < 300; ++i) {
    auto garbled = bytes;
    for (int k = 0; k < 4; ++k)
      garbled[rng() % 64] = static_cast<char>(rng());
    try {
      auto d = train::dataset::from_bytes(garbled);
      CHECK(d.count() >= 0);
    } catch (const hvactor::error&) {
      // Rejected, as it should be; anything else (a crash, bad_alloc) fails.
    }
  }
}

TEST_CASE("metrics and reports round-trip with their types") {
  train::metrics m{{"loss", 0.25}, {"epoch", 3}, {"note", "hi"}, {"flag", true}};
  auto back = train::decode_values(train::encode_values(m));
  CHECK(back == m);
  CHECK(back["epoch"].is_int());
  CHECK(back["loss"].as_double() == 0.25);
  CHECK(back["note"].as_string() == "hi");
  CHECK_THROWS_AS(back["note"].as_double(), std::invalid_argument);
  CHECK(back["epoch"].as_double() == 3.0);
  auto [rm, ck] = train::decode_report(train::encode_report(m, true));
  CHECK(rm == m);
  CHECK(ck);
  CHECK_THROWS_AS(train::decode_values({'\x05', 0, 0, 0}), hvactor::error);
}

TEST_CASE("a shard's byte form: columns 64-byte aligned and shared with the buffer, version 1 "
          "still read") {
  auto ds = iota_rows(1001);
  auto bytes = ds.to_bytes();
  auto buf = train::fresh_bytes(bytes.size());
  CHECK(reinterpret_cast<uintptr_t>(buf.data.get()) % 4096 == 0);
  std::memcpy(buf.data.get(), bytes.data(), bytes.size());
  auto* first = buf.data.get();
  auto back = train::dataset::from_bytes(std::shared_ptr<const std::byte>{buf.data}, buf.size);
  for (auto& [name, col] : back.columns()) {
    INFO(name);
    // No copy: the column's bytes are inside the buffer, aligned.
    CHECK(col.data() >= first);
    CHECK(col.data() < first + buf.size);
    CHECK((col.data() - first) % 64 == 0);
  }
  CHECK(back["x"].values<double>()[1000] == 1000.0);
  // The buffer outlives its last owner's other references.
  auto x = back["x"];
  back = {};
  buf = {};
  CHECK(x.values<double>()[7] == 7.0);

  // Version 1: no padding before the column's bytes (hand-written).
  hvactor::byte_writer w;
  w.raw("HVDS", 4);
  w.u32(1);
  w.u64(3);
  w.u32(1);
  w.str("v");
  w.u8(static_cast<uint8_t>(train::dtype::float64));
  w.u32(0);
  w.u64(24);
  for (double v : {1.5, 2.5, 3.5})
    w.f64(v);
  auto v1 = train::dataset::from_bytes(w.take());
  CHECK(v1.count() == 3);
  CHECK(v1["v"].values<double>()[2] == 3.5);
  // Another version is named.
  auto v9 = bytes;
  v9[4] = 9;
  CHECK_THROWS_WITH_AS(train::dataset::from_bytes(v9), doctest::Contains("version 9"),
                       hvactor::error);
}

TEST_CASE("shard files: opened as the driver serves them, mapped as a worker on its machine "
          "maps them, clear errors") {
  scratch dir;
  fs::create_directories(dir.path / "0");
  std::vector<char> value(9'000'001);
  for (size_t i = 0; i < value.size(); ++i)
    value[i] = static_cast<char>(i * 31);
  std::ofstream{dir.path / "0" / "1", std::ios::binary}.write(value.data(),
                                                               static_cast<std::streamsize>(value.size()));
  auto root = dir.path.string();
  {
    auto [fd, size] = train::open_shard_file(root, 0, 1);
    CHECK(size == value.size());
    std::vector<char> back(value.size());
    size_t got = 0;
    while (got < back.size()) {
      auto n = ::pread(fd, back.data() + got, back.size() - got, static_cast<off_t>(got));
      REQUIRE(n > 0);
      got += static_cast<size_t>(n);
    }
    ::close(fd);
    CHECK(back == value);
  }
  CHECK_THROWS_WITH_AS(train::open_shard_file(root, 0, 2),
                       doctest::Contains("no shard 2 of dataset 0"), hvactor::error);
  CHECK_THROWS_AS(train::open_shard_file(root, 0, -1), hvactor::error);
  CHECK_THROWS_AS(train::open_shard_file(root, 7, 0), hvactor::error);
  CHECK_THROWS_AS(train::open_shard_file("", 0, 1), hvactor::error);
  // A link in the file's place is not followed; a directory is refused.
  fs::create_symlink(dir.path / "0" / "1", dir.path / "0" / "3");
  CHECK_THROWS_AS(train::open_shard_file(root, 0, 3), hvactor::error);
  fs::create_directories(dir.path / "0" / "4");
  CHECK_THROWS_WITH_AS(train::open_shard_file(root, 0, 4),
                       doctest::Contains("not a regular file"), hvactor::error);

  auto mapped = train::map_file((dir.path / "0" / "1").string());
  REQUIRE(mapped.size == value.size());
  CHECK(std::memcmp(mapped.data.get(), value.data(), value.size()) == 0);
  // Removing the file (as the driver does at the attempt's end) keeps the
  // mapping's bytes.
  fs::remove(dir.path / "0" / "1");
  CHECK(static_cast<char>(mapped.data.get()[value.size() - 1]) == value.back());
  CHECK_THROWS_AS(train::map_file((dir.path / "0").string()), hvactor::error); // a directory
  CHECK_THROWS_AS(train::map_file((dir.path / "missing").string()), hvactor::error);

  // Fresh memory: zeroed, writable, aligned; huge sizes are an error, not a crash.
  auto fresh = train::fresh_bytes(5 << 20);
  CHECK(fresh.size == size_t{5} << 20);
  CHECK(reinterpret_cast<uintptr_t>(fresh.data.get()) % (2 << 20) == 0);
  CHECK(fresh.data.get()[fresh.size - 1] == std::byte{0});
  fresh.data.get()[fresh.size - 1] = std::byte{7};
  CHECK(train::fresh_bytes(0).size == 0);
  // Each buffer owns whole 2 MiB pages from its start, all of them mapped
  // by its own mapping: sizes that end anywhere in a huge page, many times
  // (a buffer that once claimed pages past its mapping unmapped another
  // thread's stack when it was freed).
  std::mt19937_64 rng{7};
  for (int i = 0; i < 200; ++i) {
    size_t n = (size_t{2} << 20) + rng() % (size_t{9} << 20);
    auto b = train::fresh_bytes(n);
    size_t whole = (n + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
    CHECK(::msync(b.data.get(), whole, MS_ASYNC) == 0);
    b.data.get()[n - 1] = std::byte{1};
  }
  CHECK_THROWS_AS(train::fresh_bytes(SIZE_MAX - 5), hvactor::error);
  CHECK_THROWS_AS(train::fresh_bytes(size_t{1} << 62), hvactor::error);
}

TEST_CASE("machine_view: stable in a process, different in another mount namespace") {
  auto view = train::machine_view();
  CHECK_FALSE(view.empty());
  CHECK(train::machine_view() == view);
  CHECK(view.find("mnt:[") != std::string::npos);
  if (::geteuid() == 0 && fs::exists("/usr/bin/unshare")) {
    // A process in a mount namespace of its own sees another view.
    std::string cmd = "/usr/bin/unshare -m /usr/bin/readlink /proc/self/ns/mnt";
    std::unique_ptr<FILE, int (*)(FILE*)> p{::popen(cmd.c_str(), "r"), ::pclose};
    REQUIRE(p);
    char buf[128] = {};
    REQUIRE(std::fgets(buf, sizeof buf, p.get()) != nullptr);
    std::string other{buf};
    other.erase(other.find_last_not_of('\n') + 1);
    CHECK(other.rfind("mnt:[", 0) == 0);
    CHECK(view.find(other) == std::string::npos);
  }
}
