# Unity build of the product, folder by folder (issue 40: the build from scratch on 2 cores).
#
# dsync_unity_by_folder(TARGET...) compiles each target's .cc files of one source folder
# (core/, events/, api/, ...) as one translation unit: the heavy headers every file
# includes (nlohmann/json, spdlog, Poco, the standard library) are parsed and their
# templates instantiated once per folder instead of once per file. The groups follow the
# folders, so a file added to or moved into a folder joins that folder's group with no
# change here.
#
# Files of one folder then share a translation unit: two of them may not both define the
# same name in an anonymous namespace (or as `static`). Such a file is compiled on its
# own: its name goes in DSYNC_UNITY_APART (by file name, so the list survives a move to
# another folder). Better: rename one of the two, and take the file off the list.
#
# -DDSYNC_UNITY_BUILD=OFF compiles file by file (as an IDE or a one-file change wants):
# the build that catches a file missing an #include, which the files before it in its
# group would supply in the default build. CI should build both ways.

option(DSYNC_UNITY_BUILD "Compile the product's .cc files one folder at a time (one translation unit per folder)" ON)

# File names whose anonymous-namespace helpers clash with another file of their folder
# (file: the name it shares).
set(DSYNC_UNITY_APART
  purge.cc reset.cc transitions.cc   # events/: Micros(), as in cancel.cc
  table_sql.cc                       # saga/steps/: Quoted(), as in table_chunks.cc
  table_verify.cc                    # saga/steps/: Both(), as in table_steps.cc
  sql.cc verify.cc                   # the same two once moved to table/ (Both() as in sync.cc)
)

function(dsync_unity_by_folder)
  if(NOT DSYNC_UNITY_BUILD)
    return()
  endif()
  foreach(target IN LISTS ARGN)
    get_target_property(sources ${target} SOURCES)
    foreach(src IN LISTS sources)
      if(NOT src MATCHES "\\.cc$")
        continue()
      endif()
      get_filename_component(name "${src}" NAME)
      cmake_path(IS_PREFIX CMAKE_BINARY_DIR "${src}" generated)
      if(name IN_LIST DSYNC_UNITY_APART OR generated)
        # Listed above, or generated (the embedded migrations and the
        # web console in the build folder: large data that changes on its own).
        continue()
      endif()
      get_filename_component(dir "${src}" DIRECTORY)
      file(RELATIVE_PATH folder "${CMAKE_SOURCE_DIR}" "${dir}")
      string(MAKE_C_IDENTIFIER "${target}_${folder}" group)
      set_source_files_properties("${src}" TARGET_DIRECTORY ${target} PROPERTIES UNITY_GROUP ${group})
    endforeach()
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  endforeach()
endfunction()
