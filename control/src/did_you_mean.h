// "Did you mean": the option or word a user most likely meant when hvprof's or hvprof-report's
// command line names one they do not have (`--start-deamon`, `hvprof recrod`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options/errors.hpp>
#include <boost/program_options/options_description.hpp>

namespace hvprof::control {

// The candidate nearest to `given` if it is near enough to be a slip of the keyboard: edits
// (a letter added, dropped, changed, or two neighbours swapped) at most a third of its length,
// and at least one; a candidate `given` is the start of counts as near too. Empty when none is.
std::string Nearest(std::string_view given, const std::vector<std::string>& candidates);

// The long options of `options`, each with its two dashes.
std::vector<std::string> LongOptionNames(const boost::program_options::options_description& options);

// Boost's message for a command line it could not read, with " (did you mean --X?)" when it
// named an option that `options` lacks but nearly has, and the help line `try`.
std::string DescribeCommandLineError(const boost::program_options::error& error,
                                     const boost::program_options::options_description& options,
                                     std::string_view try_line);

}  // namespace hvprof::control
