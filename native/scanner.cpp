// Placeholder: filled by its own issue. Registers nothing yet.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void register_scanner(nb::module_ &m) { (void)m; }
