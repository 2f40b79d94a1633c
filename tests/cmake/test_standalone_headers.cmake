# cmake -DSOURCE_DIR=<attnkit> -DWORK_DIR=<scratch> -P test_standalone_headers.cmake
# The header check's precompiled layers (cmake/standalone_headers.cmake) must never hold a header
# that the unit's own header does not include: on made-up headers, which layer each one gets.
cmake_minimum_required(VERSION 3.18)  # the project's policies
set(PROJECT_SOURCE_DIR ${WORK_DIR})
set(PROJECT_BINARY_DIR ${WORK_DIR}/build)
include(${SOURCE_DIR}/cmake/standalone_headers.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
# The rule on layers of this test's own, two of them of several headers, whatever layers the
# project precompiles; then the project's own layers on the same headers.
set(project_layers ${ATTNKIT_HEADER_PCH_LAYERS})
foreach(layer IN LISTS project_layers)
  set(project_layer_${layer} ${ATTNKIT_HEADER_PCH_LAYER_${layer}})
endforeach()
set(ATTNKIT_HEADER_PCH_LAYER_tensor "ATen/core/Tensor.h")
set(ATTNKIT_HEADER_PCH_LAYER_module "torch/nn/module.h;torch/nn/pimpl.h;torch/nn/modules/linear.h")
set(ATTNKIT_HEADER_PCH_LAYER_layers
    "ATen/core/Tensor.h;torch/nn/module.h;torch/nn/pimpl.h;torch/nn/modules/linear.h"
    "torch/nn/modules/embedding.h;torch/nn/modules/normalization.h"
    "torch/nn/modules/container/modulelist.h;torch/nn/modules/rnn.h")
set(ATTNKIT_HEADER_PCH_LAYERS tensor module layers)

function(header name)
  string(REPLACE ";" "\n" text "${ARGN}")
  file(WRITE ${WORK_DIR}/include/attnkit/${name} "#pragma once\n${text}\n")
endfunction()
header(plain.h "#include <vector>")
header(tensor.h "#include <ATen/core/Tensor.h>" "#include <vector>")
# Two of the module layer's three headers: it must not get the layer.
header(almost.h "#include <torch/nn/module.h>" "#include <torch/nn/pimpl.h>")
# The third through another attnkit header, spaced as a preprocessor allows.
header(linear.h "  #  include <torch/nn/modules/linear.h>")
header(module.h "#include \"attnkit/almost.h\"" "#include \"attnkit/linear.h\"")
header(layers.h "#include <ATen/core/Tensor.h>" "#include \"attnkit/module.h\""
       "#include <torch/nn/modules/embedding.h>" "#include <torch/nn/modules/normalization.h>"
       "#include <torch/nn/modules/container/modulelist.h>" "#include <torch/nn/modules/rnn.h>")
# Every layer's headers but one of the largest: the next one down.
header(no_rnn.h "#include \"attnkit/tensor.h\"" "#include \"attnkit/module.h\""
       "#include <torch/nn/modules/embedding.h>")
header(cycle_a.h "#include \"attnkit/cycle_b.h\"" "#include <ATen/core/Tensor.h>")
header(cycle_b.h "#include \"attnkit/cycle_a.h\"")

set(failures 0)
function(expect_layers)
  foreach(case ${ARGN})
    string(REPLACE ":" ";" case ${case})
    list(GET case 0 name)
    list(GET case 1 wanted)
    attnkit_header_pch_layer(attnkit/${name} got)
    if(NOT got STREQUAL wanted)
      message(SEND_ERROR
              "${name}: layer ${got}, wanted ${wanted} (layers ${ATTNKIT_HEADER_PCH_LAYERS})")
      math(EXPR failures "${failures} + 1")
    endif()
  endforeach()
  set(failures ${failures} PARENT_SCOPE)
endfunction()
expect_layers(plain.h:none tensor.h:tensor almost.h:none linear.h:none module.h:module
              layers.h:layers no_rnn.h:module cycle_a.h:tensor)
# The project's layers: tensor (ATen/core/Tensor.h), then module (torch/nn/module.h alone).
set(ATTNKIT_HEADER_PCH_LAYERS ${project_layers})
foreach(layer IN LISTS project_layers)
  set(ATTNKIT_HEADER_PCH_LAYER_${layer} ${project_layer_${layer}})
endforeach()
expect_layers(plain.h:none tensor.h:tensor almost.h:module linear.h:none module.h:module
              layers.h:module no_rnn.h:module cycle_a.h:tensor)
file(REMOVE_RECURSE ${WORK_DIR})
if(failures)
  message(FATAL_ERROR "${failures} header(s) got the wrong precompiled layer")
endif()
message(STATUS "every made-up header got the layer it includes")
