// sigprop/montecarlo/random.hpp -- a reproducible random source.
//
// std::normal_distribution differs between standard libraries, so the
// simulator owns its sampler: the same seed gives the same numbers with any
// compiler. Generator: xoshiro256** (Blackman and Vigna, "Scrambled linear
// pseudorandom number generators", ACM TOMS 47(4), 2021), seeded through
// splitmix64 as its authors recommend. Normals: the ziggurat method with 256
// layers (Marsaglia and Tsang, "The Ziggurat Method for Generating Random
// Variables", J. Stat. Softw. 5(8), 2000; tail by their section 2 method),
// for speed: drawing normals is much of a simulation's cost.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <Eigen/Core>

namespace sigprop::montecarlo {

class Random {
 public:
  explicit Random(std::uint64_t seed) {
    for (auto& s : state_) s = splitmix64(seed);
  }

  /// Uniform 64-bit integer.
  std::uint64_t next() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  /// Uniform on (0, 1): 53 random bits, never exactly 0.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

  /// Standard normal.
  double normal() {
    const auto& t = ziggurat();
    for (;;) {
      const std::uint64_t bits = next();
      const std::size_t i = bits & 0xff;
      const double u = (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-52 - 1;  // (-1, 1)
      const double z = u * t.x[i];
      if (std::abs(z) < t.x[i + 1]) return z;  // inside the layer's rectangle
      if (i == 0) {                            // the tail beyond r
        double a, b;
        do {
          a = -std::log(uniform()) / Ziggurat::r;
          b = -std::log(uniform());
        } while (2 * b < a * a);
        return u < 0 ? -(Ziggurat::r + a) : Ziggurat::r + a;
      }
      const double y = t.f[i + 1] + uniform() * (t.f[i] - t.f[i + 1]);
      if (y < std::exp(-0.5 * z * z)) return z;
    }
  }

  /// Matrix of i.i.d. N(0, variance) entries.
  Eigen::MatrixXd normal_matrix(Eigen::Index rows, Eigen::Index cols, double variance = 1) {
    const double sd = std::sqrt(variance);
    Eigen::MatrixXd m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = sd * normal();
    return m;
  }

  /// Matrix of i.i.d. uniform entries on (-a, a), a = sqrt(3 variance): the
  /// same variance as normal_matrix, excess kurtosis -1.2 (PyTorch's
  /// xavier_uniform_ and kaiming_uniform_).
  Eigen::MatrixXd uniform_matrix(Eigen::Index rows, Eigen::Index cols, double variance = 1) {
    const double a = std::sqrt(3 * variance);
    Eigen::MatrixXd m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = a * (2 * uniform() - 1);
    return m;
  }

  /// normal_matrix, or uniform_matrix when `uniform`.
  Eigen::MatrixXd weight_matrix(Eigen::Index rows, Eigen::Index cols, double variance, bool uniform) {
    return uniform ? uniform_matrix(rows, cols, variance) : normal_matrix(rows, cols, variance);
  }

  /// Independent random source for a sub-task (trial, grid point).
  Random split() { return Random(next()); }

 private:
  // Layer edges x[0] = v/f(r) > x[1] = r > ... > x[256] = 0 and f(x) = e^{-x^2/2};
  // each layer has area v (Marsaglia and Tsang 2000, section 3).
  struct Ziggurat {
    static constexpr double r = 3.6541528853610088;
    static constexpr double v = 4.92867323399e-3;
    double x[257], f[257];
    Ziggurat() {
      f[1] = std::exp(-0.5 * r * r);
      x[0] = v / f[1];
      f[0] = 0;  // unused: layer 0 falls back to the tail
      x[1] = r;
      for (int i = 1; i < 255; ++i) {
        x[i + 1] = std::sqrt(-2 * std::log(v / x[i] + f[i]));
        f[i + 1] = std::exp(-0.5 * x[i + 1] * x[i + 1]);
      }
      x[256] = 0;
      f[256] = 1;
    }
  };
  static const Ziggurat& ziggurat() {
    static const Ziggurat table;
    return table;
  }

  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  std::uint64_t state_[4]{};
};

}  // namespace sigprop::montecarlo
