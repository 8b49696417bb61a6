// fake source for tests/structure/check-deps-selftest.sh
#include <yaml-cpp/yaml.h>
