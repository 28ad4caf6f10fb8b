# The arrows between execd's rooms point one way: the owners (exec/, journal/,
# runners/, sessions/, files/, watch/, metrics/, proxy/, envd/, lifecycle/)
# are used by the handlers in api/ and never include them, so an owner can be read, tested and moved without the HTTP
# routes. Run at every build (`cmake -P`, from the execd_layering target);
# it fails the build naming each include that points back up.
file(GLOB_RECURSE owned LIST_DIRECTORIES false
     ${SOURCE_DIR}/execd/exec/* ${SOURCE_DIR}/execd/journal/* ${SOURCE_DIR}/execd/runners/*
     ${SOURCE_DIR}/execd/sessions/* ${SOURCE_DIR}/execd/files/* ${SOURCE_DIR}/execd/watch/* ${SOURCE_DIR}/execd/metrics/*
     ${SOURCE_DIR}/execd/proxy/* ${SOURCE_DIR}/execd/envd/* ${SOURCE_DIR}/execd/lifecycle/*)
set(back "")
foreach(f ${owned})
  file(STRINGS ${f} hits REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]execd/api/")
  foreach(h ${hits})
    string(REPLACE "${SOURCE_DIR}/" "" rel ${f})
    string(APPEND back "\n  ${rel}: ${h}")
  endforeach()
endforeach()
if(back)
  message(FATAL_ERROR "owners must not include execd/api/ (handlers):${back}")
endif()
