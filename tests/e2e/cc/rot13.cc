// rot13 IN OUT: a C++ tool that //gen:rot13 runs (built for the host, staged
// as an input of the genrule's action with its runfiles).
#include <fstream>
#include <iostream>
#include <sstream>

#include "cc/calc.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: rot13 IN OUT\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "rot13: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::ofstream out(argv[2], std::ios::binary);
  out << calc::Rot13(text.str());
  return out ? 0 : 1;
}
