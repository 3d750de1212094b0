// The whole public C++ API in one include.
#pragma once

#include "base/error.h"
#include "graph/computing_graph.h"
#include "graph/executable.h"
#include "graph/symbol_var.h"
#include "memory/tensor.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/reduce.h"
#include "operators/registry.h"
#include "operators/tensor_manip.h"
#include "serialization/serializer.h"
