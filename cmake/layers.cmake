# The build's helpers: each folder a static library that sees only the
# layers under it, and files compiled into the binary.

# ssm_layer(NAME DIR [DEPS layers...] [LIBS libs...] [SOURCES extra...]
#           [FILES files...])
# A static library of DIR's *.c (or of FILES alone) and SOURCES, linking
# the layers DEPS (whose folders it may include) and the libraries LIBS.
# Its include root is build/layers/NAME/, holding links to DIR and to the
# folders of DEPS and theirs, so an upward include ("runtime/ssmc.h" from
# ir/) is a build error. Headers are included from that one root:
# #include "ir/ir.h".
function(ssm_layer name dir)
  cmake_parse_arguments(L "" "" "DEPS;LIBS;SOURCES;FILES" ${ARGN})
  if(L_FILES)
    set(srcs ${L_FILES})
  else()
    file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.c)
  endif()
  add_library(${name} STATIC ${srcs} ${L_SOURCES})
  target_link_libraries(${name} PUBLIC ${L_DEPS} ${L_LIBS})
  ssm_layer_root(${name} ${name} ${dir} ${L_DEPS})
endfunction()

# Gives target `tgt` the include root build/layers/<root> that shows folder
# `dir` and the folders of the layers in ARGN (and theirs).
function(ssm_layer_root tgt root dir)
  set(dirs ${dir})
  foreach(d ${ARGN})
    get_target_property(dd ${d} SSM_LAYER_DIRS)
    list(APPEND dirs ${dd})
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  list(SORT dirs)
  if(TARGET ${root})
    set_target_properties(${root} PROPERTIES SSM_LAYER_DIRS "${dirs}")
  endif()
  set(at ${CMAKE_BINARY_DIR}/layers/${root})
  file(REMOVE_RECURSE ${at}) # links are removed, never followed
  set(linked "")
  foreach(d ${dirs})
    set(covered 0)
    foreach(l ${linked}) # runtime/ already shows runtime/cpu/
      string(FIND "${d}/" "${l}/" pos)
      if(pos EQUAL 0)
        set(covered 1)
      endif()
    endforeach()
    if(NOT covered)
      get_filename_component(parent ${at}/${d} DIRECTORY)
      file(MAKE_DIRECTORY ${parent})
      file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${d} ${at}/${d} SYMBOLIC)
      list(APPEND linked ${d})
    endif()
  endforeach()
  target_include_directories(${tgt} PRIVATE ${at})
endfunction()

# ssm_embed(OUT DIR GLOB FUNC): OUT, a C file holding every file of DIR
# that matches GLOB (several patterns separated by ','), looked up by
# FUNC(name). Architecture YAMLs, kernel templates and the web site's files
# are compiled into the binary so that ssmc runs from any directory.
function(ssm_embed out dir glob func)
  string(REPLACE "," ";" globs "${glob}")
  set(deps "")
  foreach(g ${globs})
    file(GLOB d CONFIGURE_DEPENDS ${dir}/${g})
    list(APPEND deps ${d})
  endforeach()
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DDIR=${dir} -DGLOB=${glob} -DFUNC=${func}
            -P ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    DEPENDS ${deps} ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    COMMENT "Embedding ${glob}")
endfunction()

# ssm_library(NAME OUTPUT LAYERS...): libOUTPUT.a and libOUTPUT.so holding
# the objects of LAYERS; the shared one exports only the public API
# (runtime/ssmc.map). The link libraries of the layers come with it.
function(ssm_library name output)
  set(objects "")
  set(libs "")
  foreach(l ${ARGN})
    list(APPEND objects $<TARGET_OBJECTS:${l}>)
    get_target_property(ll ${l} INTERFACE_LINK_LIBRARIES)
    foreach(x ${ll})
      if(NOT x IN_LIST ARGN)
        list(APPEND libs ${x})
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES libs)
  add_library(${name}_static STATIC ${objects})
  set_target_properties(${name}_static PROPERTIES OUTPUT_NAME ${output})
  add_library(${name}_shared SHARED ${objects})
  set_target_properties(${name}_shared PROPERTIES OUTPUT_NAME ${output} VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
    LINK_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/ssmc.map)
  target_link_libraries(${name}_shared PRIVATE ${libs})
  target_link_options(${name}_shared PRIVATE
    -Wl,--version-script=${CMAKE_SOURCE_DIR}/runtime/ssmc.map -Wl,--no-undefined)
endfunction()
