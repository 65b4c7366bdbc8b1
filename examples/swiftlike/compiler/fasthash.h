// fasthash.h: the content hash shared by the compiler stand-in and the module
// checker.
//
// Not cryptographic. Two 64-bit lanes over 8-byte words, so that hashing every
// input of a 466 MB action costs a fraction of a second, like the reading a
// real compiler does; the checker recomputes it to prove that each module a
// dependent recorded is byte for byte the one its dependency wrote.
#ifndef SWIFTLIKE_COMPILER_FASTHASH_H_
#define SWIFTLIKE_COMPILER_FASTHASH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace swiftlike {

class FastHash {
 public:
  FastHash() = default;

  void Update(const void* data, size_t size) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    total_ += size;
    // Finish a word begun by the previous call.
    while (pending_size_ != 0 && pending_size_ < 8 && size > 0) {
      pending_[pending_size_++] = *p++;
      --size;
    }
    if (pending_size_ == 8) {
      Mix(Load(pending_));
      pending_size_ = 0;
    }
    while (size >= 8) {
      Mix(Load(p));
      p += 8;
      size -= 8;
    }
    while (size > 0) {
      pending_[pending_size_++] = *p++;
      --size;
    }
  }

  void Update(const std::string& s) { Update(s.data(), s.size()); }

  // 32 hex digits. Does not change the state.
  std::string HexDigest() const {
    uint64_t a = a_, b = b_;
    uint64_t tail = 0;
    std::memcpy(&tail, pending_, pending_size_);
    a = Avalanche(a ^ tail ^ (total_ * 0x9E3779B97F4A7C15ULL));
    b = Avalanche(b ^ Avalanche(tail + total_));
    static const char kHex[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
      out[i] = kHex[(a >> (60 - 4 * i)) & 0xf];
      out[16 + i] = kHex[(b >> (60 - 4 * i)) & 0xf];
    }
    return out;
  }

 private:
  static uint64_t Load(const unsigned char* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  }
  static uint64_t Avalanche(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
  }
  void Mix(uint64_t w) {
    a_ = (a_ ^ w) * 0x100000001b3ULL;
    a_ ^= a_ >> 29;
    b_ = (b_ + w) * 0x9E3779B97F4A7C15ULL;
    b_ ^= b_ >> 31;
  }

  uint64_t a_ = 0xcbf29ce484222325ULL;
  uint64_t b_ = 0x84222325cbf29ce4ULL;
  uint64_t total_ = 0;
  unsigned char pending_[8] = {};
  size_t pending_size_ = 0;
};

}  // namespace swiftlike

#endif  // SWIFTLIKE_COMPILER_FASTHASH_H_
