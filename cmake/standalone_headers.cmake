# The check that every public header compiles on its own (tests/CMakeLists.txt), made cheaper with
# precompiled LibTorch headers without letting a header lean on what it does not include itself.
#
# One translation unit per header, which includes only that header, parsed with -fsyntax-only.
# Parsing LibTorch's headers is nearly all of the cost (67 units, 215 s of a 2-core machine's ctest
# when each parsed them itself), so the units are grouped and each group gets a precompiled header
# of LibTorch headers. That is sound only if the precompiled header holds nothing the unit's header
# does not include itself: a header that forgot an #include would otherwise pass. So a unit takes
# the largest of the layers below whose every header its own header includes, directly or through
# attnkit's headers (read from the #include lines); a header that includes none of them is parsed
# without one. The layers say only what is worth precompiling; which unit takes which is computed.
#
# Two layers, measured (GCC 12, one core of a Zen 5, 73 units): GCC reads a precompiled header
# whole before the unit starts, so a unit costs about 1 s per 100 MB of it. The tensor layer
# (128 MB) makes a unit of the tensor headers about 1 s; the module layer (384 MB) 3.5-6.4 s,
# against 10-14 s parsed without it. A third layer of the torch::nn modules (467 MB, 37 s to
# build) made its 10 units no faster (7.0-7.5 s a unit with it, 6.3-6.6 with the module layer),
# and a module layer of three headers left io/state_dict.h, which includes only
# torch/nn/module.h, to parse it itself (13.8 s against 3.5). With these two layers the header
# check took 178 s on one core (`make -j1`, ccache off) against 236 with the three before.
set(ATTNKIT_HEADER_PCH_LAYER_tensor "ATen/core/Tensor.h")
set(ATTNKIT_HEADER_PCH_LAYER_module "torch/nn/module.h")
set(ATTNKIT_HEADER_PCH_LAYERS tensor module)  # smallest first: the last that fits wins

# attnkit_external_includes(<header> <var>): the headers outside attnkit that <header> (a path as
# included, "attnkit/...") includes, itself or through the attnkit headers it includes.
function(attnkit_external_includes header var)
  string(MAKE_C_IDENTIFIER "${header}" key)
  get_property(known GLOBAL PROPERTY attnkit_includes_${key} SET)
  if(known)
    get_property(result GLOBAL PROPERTY attnkit_includes_${key})
    set(${var} "${result}" PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY attnkit_includes_${key} "")  # an include cycle ends here
  set(result)
  foreach(dir ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/generated)
    if(EXISTS ${dir}/${header})
      file(STRINGS ${dir}/${header} lines REGEX "^[ \t]*#[ \t]*include")
      foreach(line IN LISTS lines)
        if(line MATCHES "#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]")
          set(name ${CMAKE_MATCH_1})
          if(name MATCHES "^attnkit/")
            attnkit_external_includes(${name} nested)
            list(APPEND result ${nested})
          else()
            list(APPEND result ${name})
          endif()
        endif()
      endforeach()
      break()
    endif()
  endforeach()
  list(REMOVE_DUPLICATES result)
  set_property(GLOBAL PROPERTY attnkit_includes_${key} "${result}")
  set(${var} "${result}" PARENT_SCOPE)
endfunction()

# attnkit_header_pch_layer(<header> <var>): the name of the largest layer <header> includes all
# of, or "none".
function(attnkit_header_pch_layer header var)
  attnkit_external_includes(${header} includes)
  set(chosen none)
  foreach(layer IN LISTS ATTNKIT_HEADER_PCH_LAYERS)
    set(fits TRUE)
    foreach(name IN LISTS ATTNKIT_HEADER_PCH_LAYER_${layer})
      if(NOT name IN_LIST includes)
        set(fits FALSE)
      endif()
    endforeach()
    if(fits)
      set(chosen ${layer})
    endif()
  endforeach()
  set(${var} ${chosen} PARENT_SCOPE)
endfunction()

# attnkit_add_standalone_header_check(<target> <headers>...): <target> builds one unit per header,
# an object library per layer, each with its layer precompiled.
function(attnkit_add_standalone_header_check target)
  set(units_none)
  foreach(layer IN LISTS ATTNKIT_HEADER_PCH_LAYERS)
    set(units_${layer})
  endforeach()
  foreach(header IN LISTS ARGN)
    string(MAKE_C_IDENTIFIER ${header} unit)
    set(unit ${CMAKE_CURRENT_BINARY_DIR}/standalone_headers/${unit}.cpp)
    file(CONFIGURE OUTPUT ${unit} CONTENT "#include \"${header}\"\n")
    attnkit_header_pch_layer(${header} layer)
    list(APPEND units_${layer} ${unit})
  endforeach()
  add_custom_target(${target})
  foreach(layer none ${ATTNKIT_HEADER_PCH_LAYERS})
    if(NOT units_${layer})
      continue()
    endif()
    add_library(${target}_${layer} OBJECT EXCLUDE_FROM_ALL ${units_${layer}})
    target_link_libraries(${target}_${layer} PRIVATE attnkit)
    set_target_properties(${target}_${layer} PROPERTIES UNITY_BUILD OFF)  # one header per unit
    target_compile_options(${target}_${layer} PRIVATE -Wall -Wextra -Wno-unused-parameter)
    # Parsing is what is tested: the units generate no code (-fsyntax-only, a fifth less time than
    # -O0). On the units only: the precompiled header itself must be written.
    set_source_files_properties(${units_${layer}} PROPERTIES COMPILE_OPTIONS
                                "-fsyntax-only;-Winvalid-pch")
    if(NOT layer STREQUAL "none")
      set(pch)
      foreach(name IN LISTS ATTNKIT_HEADER_PCH_LAYER_${layer})
        list(APPEND pch "<${name}>")
      endforeach()
      target_precompile_headers(${target}_${layer} PRIVATE ${pch})
    endif()
    add_dependencies(${target} ${target}_${layer})
  endforeach()
endfunction()
