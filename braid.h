// The whole public C++ API in one include.
#pragma once

#include "base/error.h"
#include "graph/computing_graph.h"
#include "graph/executable.h"
#include "graph/symbol_var.h"
#include "memory/tensor.h"
#include "operators/concat_split.h"
#include "operators/elemwise.h"
#include "operators/fill.h"
#include "operators/indexing.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/normalization.h"
#include "operators/reduce.h"
#include "operators/registry.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"
